"""Chat, Slack's Web API wire format, under /chat: no idempotency key; message metadata readable
from history (`include_all_metadata`), `oldest`/`latest` windows, cursor pages with `has_more`
and `response_metadata.next_cursor`, and `ok: false` errors (`channel_not_found` for an id that
is not a Slack conversation id, or a conversation nobody ever posted to).

A channel exists once a message was addressed to it, whether or not the post then committed
(the sandbox cannot know a workspace's channels; a post that failed still went to one).
"""

from __future__ import annotations

import base64
import json
import re
from typing import Annotated
from urllib.parse import parse_qsl

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from reconciler.sandbox.credentials import slack_token
from reconciler.sandbox.faults import Faults, perform_write, read_faults, requested_faults
from reconciler.sandbox.state import JSONObject
from reconciler.sandbox.wire import State, read_json_body, reads_available

PROVIDER = "chat"
#: Slack conversation ids: C (channel), G (private), D (direct), then upper-case alphanumerics.
_CHANNEL = re.compile(r"[CGD][A-Z0-9]+")

router = APIRouter(prefix="/chat", tags=["chat"],
                   dependencies=[Depends(slack_token), Depends(reads_available)])


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
    thread, metadata = body.data.get("thread_ts"), body.data.get("metadata")
    state.open_scope(PROVIDER, channel)

    def build(seq: int, now: float) -> tuple[str, JSONObject]:
        # Slack's ts is unique per channel; the clock alone would repeat under a test clock.
        ts = f"{int(now)}.{seq % 1_000_000:06d}"
        message: JSONObject = {"ts": ts, "text": text, "type": "message"}
        # A message without metadata has no `metadata` key at Slack (not a null one).
        if metadata is not None:
            message["metadata"] = metadata
        if isinstance(thread, str) and thread:
            message["thread_ts"] = thread
        return f"{channel}/{ts}", message

    def commit(copies: int) -> JSONResponse:
        message = state.commit(PROVIDER, body.request_hash, build, copies=copies, scope=channel)
        return JSONResponse(
            {"ok": True, "channel": channel, "ts": message.data["ts"], "message": message.data}
        )

    return await perform_write(state, faults, commit)


async def _arguments(request: Request) -> dict[str, str]:
    """A Web API method's arguments: the query, and a form or JSON body (Slack's SDKs POST
    them form-encoded; GET with a query works too)."""
    args = dict(request.query_params)
    if request.method == "POST":
        raw = await request.body()
        if request.headers.get("content-type", "").startswith("application/json"):
            try:
                body = json.loads(raw)
            except ValueError:
                body = {}
            args.update({k: str(v).lower() if isinstance(v, bool) else str(v)
                         for k, v in (body.items() if isinstance(body, dict) else ())})
        else:
            args.update(parse_qsl(raw.decode("utf-8", "replace")))
    return args


def _number(text: str | None) -> float | None:
    try:
        return None if text is None else float(text)
    except ValueError:
        return None


ReadFaults = Annotated[Faults, Depends(read_faults)]


@router.api_route("/api/conversations.history", methods=["GET", "POST"])
async def conversations_history(request: Request, state: State,
                                faults: ReadFaults) -> JSONResponse:
    """A channel's messages; a thread's replies are not among them (only its parent is)."""
    return await _messages(request, state, faults, thread=False)


@router.api_route("/api/conversations.replies", methods=["GET", "POST"])
async def conversations_replies(request: Request, state: State,
                                faults: ReadFaults) -> JSONResponse:
    """A thread: its parent (`ts`) and the replies to it, oldest first as Slack has them."""
    return await _messages(request, state, faults, thread=True)


async def _messages(request: Request, state: State, faults: Faults, *,
                    thread: bool) -> JSONResponse:
    args = await _arguments(request)
    channel = args.get("channel", "")
    if not _CHANNEL.fullmatch(channel) or not state.scope_open(PROVIDER, channel):
        return _slack_error("channel_not_found")
    limit = int(args["limit"]) if args.get("limit", "").isdigit() else 100
    oldest, latest = _number(args.get("oldest", "0")), _number(args.get("latest"))
    start = _offset(args.get("cursor", ""))
    if start is None:
        return _slack_error("invalid_cursor")
    if oldest is None or not 1 <= limit <= 999 or ("latest" in args and latest is None):
        return _slack_error("invalid_arguments")
    parent = args.get("ts", "")
    if thread and not parent:
        return _slack_error("thread_not_found")
    found = [r.data for r in state.listing(PROVIDER) if r.scope == channel
             and float(r.data["ts"]) > oldest and (latest is None or float(r.data["ts"]) < latest)
             and ((r.data["ts"] == parent or r.data.get("thread_ts") == parent) if thread
                  else r.data.get("thread_ts", r.data["ts"]) == r.data["ts"])]
    if thread:
        found.reverse()
    # A short page (the fault) is what Slack may send: fewer than `limit` and `has_more`.
    size = max(0, min(limit, len(found) - start)) // 2 if faults.short_page else limit
    page = found[start:start + size]
    more = start + size < len(found)
    # Like Slack, metadata is only shown to a caller who asks for it.
    metadata = args.get("include_all_metadata", "false").lower() in ("true", "1")
    messages = [m if metadata else {k: v for k, v in m.items() if k != "metadata"}
                for m in page]
    return JSONResponse({"ok": True, "messages": messages, "has_more": more,
                         "response_metadata": {"next_cursor": _cursor(start + size) if more
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
