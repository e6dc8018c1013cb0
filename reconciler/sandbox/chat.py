"""Chat, Slack's Web API wire format, under /chat: no idempotency key; message metadata readable
from history (`include_all_metadata`), `oldest`/`latest` windows, cursor pages with `has_more`
and `response_metadata.next_cursor`, and `ok: false` errors (`channel_not_found` for an id that
is not a Slack conversation id).
"""

from __future__ import annotations

import base64
import re
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from reconciler.sandbox.faults import Faults, perform_write, requested_faults
from reconciler.sandbox.state import JSONObject
from reconciler.sandbox.wire import State, read_json_body, reads_available

PROVIDER = "chat"
#: Slack conversation ids: C (channel), G (private), D (direct), then upper-case alphanumerics.
_CHANNEL = re.compile(r"[CGD][A-Z0-9]+")

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
    if not isinstance(channel, str) or not _CHANNEL.fullmatch(channel):
        return _slack_error("channel_not_found")
    if not isinstance(text, str) or not text:
        return _slack_error("no_text")

    def build(seq: int, now: float) -> tuple[str, JSONObject]:
        # Slack's ts is unique per channel; the clock alone would repeat under a test clock.
        ts = f"{int(now)}.{seq % 1_000_000:06d}"
        return f"{channel}/{ts}", {
            "ts": ts,
            "text": text,
            "type": "message",
            "metadata": body.data.get("metadata"),
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
    oldest: float = 0.0,
    latest: float | None = None,
    cursor: str = "",
) -> JSONResponse:
    if not _CHANNEL.fullmatch(channel):
        return _slack_error("channel_not_found")
    start = _offset(cursor)
    if start is None:
        return _slack_error("invalid_cursor")
    found = [r.data for r in state.listing(PROVIDER) if r.scope == channel
             and float(r.data["ts"]) > oldest and (latest is None or float(r.data["ts"]) < latest)]
    page = found[start:start + limit]
    more = start + limit < len(found)
    # Like Slack, metadata is only shown to a caller who asks for it.
    messages = [
        m if include_all_metadata else {k: v for k, v in m.items() if k != "metadata"}
        for m in page
    ]
    return JSONResponse({"ok": True, "messages": messages, "has_more": more,
                         "response_metadata": {"next_cursor": _cursor(start + limit) if more
                                               else ""}})


def _cursor(offset: int) -> str:
    return base64.b64encode(f"offset:{offset}".encode()).decode()


def _offset(cursor: str) -> int | None:
    if not cursor:
        return 0
    try:
        kind, _, number = base64.b64decode(cursor, validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return int(number) if kind == "offset" and number.isdigit() else None
