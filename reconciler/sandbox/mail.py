"""Email, Postmark's wire format, under /mail: no idempotency key, found again by metadata
(`metadata_<key>=` filters on the outbound search), errors as 422 with an `ErrorCode`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from reconciler.sandbox.credentials import postmark_token
from reconciler.sandbox.faults import Faults, perform_write, requested_faults
from reconciler.sandbox.state import JSONObject
from reconciler.sandbox.wire import State, read_json_body, reads_available

PROVIDER = "mail"

#: Served under /mail, and at the root too: Postmark's SDKs join their absolute endpoint paths
#: (`/email`) to the host, dropping any path of a base URL.
router = APIRouter(tags=["email"],
                   dependencies=[Depends(postmark_token), Depends(reads_available)])


def rfc3339(unix_s: float) -> str:
    """Postmark's timestamps: RFC 3339 in UTC, to the microsecond."""
    stamp = datetime.fromtimestamp(unix_s, UTC).isoformat(timespec="microseconds")
    return stamp.replace("+00:00", "Z")


def _invalid() -> JSONResponse:
    """Postmark's answer to a malformed send."""
    return JSONResponse({"ErrorCode": 300, "Message": "Invalid email request"}, 422)


@router.post("/email")
async def send_email(
    request: Request, state: State, faults: Annotated[Faults, Depends(requested_faults)]
) -> JSONResponse:
    body = await read_json_body(request)
    if body is None:
        return _invalid()
    to, metadata = body.data.get("To"), body.data.get("Metadata", {})
    if not isinstance(to, str) or not to or not isinstance(metadata, dict):
        return _invalid()

    def build(seq: int, now: float) -> tuple[str, JSONObject]:
        message_id = str(uuid.uuid4())
        return message_id, {
            "MessageID": message_id,
            "Metadata": metadata,
            "Status": "Sent",
            "ReceivedAt": rfc3339(now),
        }

    def commit(copies: int) -> JSONResponse:
        message = state.commit(PROVIDER, body.request_hash, build, copies=copies).data
        return JSONResponse(
            {
                "To": to,
                "SubmittedAt": message["ReceivedAt"],
                "MessageID": message["MessageID"],
                "ErrorCode": 0,
                "Message": "OK",
            }
        )

    return await perform_write(
        state, faults, commit,
        lambda status, message: JSONResponse({"ErrorCode": 0, "Message": message}, status))


@router.get("/messages/outbound")
async def search_outbound(
    request: Request,
    state: State,
    count: Annotated[int, Query(ge=1, le=500)],
    offset: Annotated[int, Query(ge=0)],
) -> JSONResponse:
    if count + offset > 10_000:
        return JSONResponse({"ErrorCode": 603, "Message": "count + offset over 10000"}, 422)
    wanted = {k.removeprefix("metadata_"): v for k, v in request.query_params.items()
              if k.startswith("metadata_")}
    found = [
        r.data
        for r in state.search(PROVIDER)
        if all(r.data["Metadata"].get(k) == v for k, v in wanted.items())
    ]
    return JSONResponse({"TotalCount": len(found), "Messages": found[offset : offset + count]})


@router.get("/messages/outbound/{message_id}/details")
async def message_details(state: State, message_id: str) -> JSONResponse:
    record = state.get(PROVIDER, message_id)
    if record is None:
        return JSONResponse({"ErrorCode": 701, "Message": "This message was not found."}, 422)
    return JSONResponse(record.data)
