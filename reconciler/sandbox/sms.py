"""Text messages, Twilio's wire format, under /twilio: the Messages resource of API 2010-04-01.

    POST /2010-04-01/Accounts/{AccountSid}/Messages.json        form: To, From, Body -> 201
    GET  /2010-04-01/Accounts/{AccountSid}/Messages/{Sid}.json  one message
    GET  /2010-04-01/Accounts/{AccountSid}/Messages.json        To, From, DateSent, DateSent<,
                                                                DateSent>, PageSize, PageToken

HTTP Basic with the Account SID as the user (any token is accepted); another account's path is
Twilio's 20003 (401). No idempotency key: Twilio has none for messages. A new message answers
`queued` and is `sent` (with its `date_sent`) from then on; list pages carry `next_page_uri`
relative to the API root, as Twilio's do. Errors are Twilio's: `{code, message, more_info,
status}`.
"""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, date, datetime
from email.utils import format_datetime
from typing import Annotated
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from reconciler.core.hashing import request_hash
from reconciler.sandbox.faults import Faults, perform_write, requested_faults
from reconciler.sandbox.shapes import twilio_error
from reconciler.sandbox.state import JSONObject
from reconciler.sandbox.wire import State, reads_available

PROVIDER = "sms"
_ROOT = "/2010-04-01/Accounts/{account}"

router = APIRouter(prefix="/twilio", tags=["sms"], dependencies=[Depends(reads_available)])


def _error(status: int, code: int, message: str) -> JSONResponse:
    return twilio_error(status, code, message).response()


def _denied(request: Request, account: str) -> JSONResponse | None:
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    try:
        user = base64.b64decode(encoded).decode().partition(":")[0]
    except (ValueError, UnicodeDecodeError):
        user = ""
    if scheme.lower() != "basic" or user != account:
        return _error(401, 20003, "Authenticate")
    return None


def _rfc2822(unix_s: float) -> str:
    return format_datetime(datetime.fromtimestamp(unix_s, UTC))


@router.post(_ROOT + "/Messages.json", status_code=201)
async def create_message(request: Request, state: State, account: str,
                         faults: Annotated[Faults, Depends(requested_faults)]) -> JSONResponse:
    denied = _denied(request, account)
    if denied is not None:
        return denied
    form = dict(parse_qsl((await request.body()).decode("utf-8", "replace"),
                          keep_blank_values=True))
    if not form.get("To"):
        return _error(400, 21604, "A 'To' phone number is required.")
    if not form.get("From") and not form.get("MessagingServiceSid"):
        return _error(400, 21603, "A 'From' phone number is required.")
    if not form.get("Body") and not form.get("MediaUrl"):
        return _error(400, 21602, "Message body is required.")
    fingerprint = request_hash(form)

    def build(seq: int, now: float) -> tuple[str, JSONObject]:
        sid = "SM" + uuid.uuid4().hex
        stamp = _rfc2822(now)
        return sid, {
            "sid": sid, "account_sid": account, "to": form["To"], "from": form.get("From"),
            "messaging_service_sid": form.get("MessagingServiceSid"), "body": form.get("Body"),
            "status": "sent", "direction": "outbound-api", "num_segments": "1",
            "date_created": stamp, "date_updated": stamp, "date_sent": stamp,
            "error_code": None, "error_message": None, "price": None, "api_version": "2010-04-01",
            "uri": f"/2010-04-01/Accounts/{account}/Messages/{sid}.json"}

    def commit(copies: int) -> JSONResponse:
        made = state.commit(PROVIDER, fingerprint, build, copies=copies, scope=account)
        # What Twilio answers at once: the message is queued, not yet sent.
        return JSONResponse({**made.data, "status": "queued", "date_sent": None}, 201)

    return await perform_write(state, faults, commit,
                               lambda status, message: _error(status, 20500, message))


@router.get(_ROOT + "/Messages/{sid}.json")
async def fetch_message(request: Request, state: State, account: str, sid: str) -> JSONResponse:
    denied = _denied(request, account)
    if denied is not None:
        return denied
    record = state.get(PROVIDER, sid)
    if record is None or record.scope != account:
        return _error(404, 20404, f"The requested resource /2010-04-01/Accounts/{account}/"
                                  f"Messages/{sid}.json was not found")
    return JSONResponse(record.data)


def _day_or_time(text: str) -> datetime | None:
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), datetime.min.time(), UTC)
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@router.get(_ROOT + "/Messages.json")
async def list_messages(
    request: Request,
    state: State,
    account: str,
    page_size: Annotated[int, Query(alias="PageSize", ge=1, le=1000)] = 50,
    page: Annotated[int, Query(alias="Page", ge=0)] = 0,
) -> JSONResponse:
    denied = _denied(request, account)
    if denied is not None:
        return denied
    query = request.query_params
    found = [r for r in state.listing(PROVIDER) if r.scope == account]
    for field, key in (("To", "to"), ("From", "from")):
        if field in query:
            found = [r for r in found if r.data[key] == query[field]]
    for param, after in (("DateSent>", True), ("DateSent<", False)):
        if param in query:
            bound = _day_or_time(query[param])
            if bound is None:
                return _error(400, 20001, f"Invalid {param}")
            found = [r for r in found
                     if (datetime.fromtimestamp(r.created_at, UTC) >= bound) is after]
    start = page * page_size
    path = f"/2010-04-01/Accounts/{account}/Messages.json"
    rest = {k: v for k, v in query.items() if k not in ("Page", "PageToken")}
    more = start + page_size < len(found)
    nxt = (f"{path}?{urlencode({**rest, 'Page': page + 1, 'PageToken': f'PA{start + page_size}'})}"
           if more else None)
    return JSONResponse({
        "messages": [r.data for r in found[start:start + page_size]],
        "page": page, "page_size": page_size, "start": start,
        "end": start + min(page_size, max(len(found) - start, 0)) - 1,
        "uri": f"{path}?{urlencode(dict(query))}", "first_page_uri": f"{path}?{urlencode(rest)}",
        "next_page_uri": nxt, "previous_page_uri": None})
