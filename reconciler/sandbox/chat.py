"""Chat, Slack-like, under /chat: no idempotency key; message metadata readable from history."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from reconciler.sandbox.faults import Faults, perform_write, requested_faults
from reconciler.sandbox.state import JSONObject
from reconciler.sandbox.wire import State, read_json_body, reads_available

PROVIDER = "chat"

router = APIRouter(prefix="/chat", tags=["chat"], dependencies=[Depends(reads_available)])


def _slack_error(code: str) -> JSONResponse:
    # Slack reports API errors with HTTP 200 and ok=false.
    return JSONResponse({"ok": False, "error": code})


@router.post("/api/chat.postMessage")
async def post_message(
    request: Request, state: State, faults: Annotated[Faults, Depends(requested_faults)]
) -> JSONResponse:
    body = await read_json_body(request)
    if body is None:
        return _slack_error("invalid_json")
    channel, text = body.data.get("channel"), body.data.get("text")
    if not isinstance(channel, str) or not channel:
        return _slack_error("channel_not_found")
    if not isinstance(text, str) or not text:
        return _slack_error("no_text")

    def build(seq: int, now: float) -> tuple[str, JSONObject]:
        # Slack's ts is unique per channel; the clock alone would repeat under a test clock.
        ts = f"{int(now)}.{seq % 1_000_000:06d}"
        return f"{channel}/{ts}", {
            "ts": ts,
            "text": text,
            "metadata": body.data.get("metadata"),
            "request_hash": body.request_hash,
        }

    def commit(copies: int) -> JSONResponse:
        message = state.commit(PROVIDER, body.request_hash, build, copies=copies, scope=channel)
        return JSONResponse(
            {"ok": True, "channel": channel, "ts": message.data["ts"], "message": message.data}
        )

    return await perform_write(state, faults, commit)


@router.get("/api/conversations.history")
async def conversations_history(
    state: State,
    channel: str = "",
    include_all_metadata: bool = False,
    limit: Annotated[int, Query(ge=1, le=999)] = 100,
) -> JSONResponse:
    if not channel:
        return _slack_error("channel_not_found")
    found = [r.data for r in state.listing(PROVIDER) if r.scope == channel]
    # Like Slack, metadata is only shown to a caller who asks for it.
    messages = [
        m if include_all_metadata else {k: v for k, v in m.items() if k != "metadata"}
        for m in found[:limit]
    ]
    return JSONResponse({"ok": True, "messages": messages, "has_more": len(found) > limit})
