"""A local fake of Anthropic's Messages API (POST /v1/messages), for the adapter's tests.

Close to the real API where an adapter could get it wrong: the x-api-key and anthropic-version
headers, the request body (required fields, tool_use/tool_result pairing), the response and
error JSON shapes, retry-after on 429, and with `"stream": true` the event stream the API sends
(message_start, content_block_start/delta/stop with text_delta and input_json_delta fragments,
message_delta with the cumulative output count, message_stop, pings, error events). Tests
script the answers (`reply`), inject failures (`fail`, `break_stream`), and `hold` a request or
`stall` a stream open until the client goes away. Every request is recorded.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fake_api import FakeApi, Frame, frame, pieces
from service_harness import serving

KEY = "sk-ant-fake-0123456789abcdef"
VERSION = "2023-06-01"
#: The error type the real API sends with each status.
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 429: "rate_limit_error",
               500: "api_error", 529: "overloaded_error"}


class _Block(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text", "tool_use", "tool_result", "image", "document"]
    id: str | None = None
    tool_use_id: str | None = None


class _Message(BaseModel):
    role: Literal["user", "assistant"]
    content: str | list[_Block]


class _Tool(BaseModel):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    input_schema: dict[str, Any]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1)
    max_tokens: int = Field(ge=1)
    messages: list[_Message] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[_Tool] | None = None
    stream: bool = False
    temperature: float | None = None
    stop_sequences: list[str] | None = None


@dataclass
class FakeAnthropic(FakeApi):
    """The fake's state, shared between the test (any thread) and the server's loop."""

    key: str = KEY
    replies: deque[dict[str, Any]] = field(default_factory=deque)

    def reply(self, content: list[dict[str, Any]], *, stop_reason: str = "end_turn",
              usage: dict[str, Any] | None = None) -> None:
        """Queue the next successful answer (content blocks in wire JSON)."""
        self.replies.append({"content": content, "stop_reason": stop_reason,
                             "usage": usage or {"input_tokens": 12, "output_tokens": 3}})


@contextmanager
def running_fake() -> Iterator[FakeAnthropic]:
    """A fresh fake served on a loopback port; its `url` is the base URL to give the adapter."""
    fake = FakeAnthropic()
    with serving(app(fake)) as url:
        fake.url = url
        yield fake


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"),
                                       "message": message}, "request_id": "req_fake"}
    return JSONResponse(body, status, headers={"request-id": "req_fake", **(headers or {})})


def app(fake: FakeAnthropic) -> FastAPI:
    api = FastAPI()

    @api.post("/v1/messages")
    async def messages(request: Request) -> Response:
        body = await fake.record(request)
        raw = json.dumps(body).encode() if not isinstance(body, str) else body.encode()
        # The key comes as x-api-key, or, from the newer SDKs, as a Bearer authorization.
        if fake.key not in (request.headers.get("x-api-key"),
                            request.headers.get("authorization", "").removeprefix("Bearer ")):
            return error(401, "invalid x-api-key")
        if request.headers.get("anthropic-version") is None:
            return error(400, "anthropic-version: header is required")
        if problem := _invalid(raw):
            return error(400, problem)
        if (failed := await fake.scripted_failure(request, error)) is not None:
            return failed
        answer = fake.replies.popleft() if fake.replies else {
            "content": [{"type": "text", "text": "(no scripted reply)"}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}}
        message = {"id": f"msg_fake_{len(fake.requests)}", "type": "message",
                   "role": "assistant", "model": body["model"], "stop_sequence": None, **answer}
        if body.get("stream"):
            return fake.streamed(request, events(message), stream_error)
        return JSONResponse(message)

    return api


def _invalid(raw: bytes) -> str | None:
    """What the real API would refuse this body for, in its wording's spirit, or None."""
    try:
        body = _Body.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        return f"{'.'.join(str(p) for p in first['loc']) or 'body'}: {first['msg']}"
    for index, message in enumerate(body.messages):
        previous = body.messages[index - 1] if index else None
        uses = _ids(previous, "tool_use") if previous and previous.role == "assistant" else set()
        results = _ids(message, "tool_result")
        if results - uses:
            return (f"messages.{index}.content: unexpected `tool_use_id` found in `tool_result` "
                    "blocks. Each `tool_result` block must have a corresponding `tool_use` "
                    "block in the previous message.")
        if uses - results:
            return (f"messages.{index}: `tool_use` ids were found without `tool_result` "
                    "blocks immediately after")
    return None


def _ids(message: _Message | None, kind: str) -> set[str | None]:
    if message is None or isinstance(message.content, str):
        return set()
    return {block.id if kind == "tool_use" else block.tool_use_id
            for block in message.content if block.type == kind}


def events(message: dict[str, Any]) -> list[Frame]:
    """`message` as the Messages API streams it."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None,
             "usage": {**usage, "output_tokens": 1}}
    frames = [frame({"type": "message_start", "message": start}, "message_start"),
              frame({"type": "ping"}, "ping")]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            fragments = [{"type": "text_delta", "text": piece} for piece in pieces(block["text"])]
        elif block["type"] == "tool_use":
            opening = {**block, "input": {}}
            arguments = json.dumps(block["input"]) if block["input"] else ""
            fragments = [{"type": "input_json_delta", "partial_json": piece}
                         for piece in pieces(arguments, 5) if piece]
        else:  # sent whole, as no delta type of this fake carries it
            opening, fragments = block, []
        frames.append(frame({"type": "content_block_start", "index": index,
                             "content_block": opening}, "content_block_start",
                            delta=block["type"] == "tool_use"))
        frames += [frame({"type": "content_block_delta", "index": index, "delta": fragment},
                         "content_block_delta", delta=True) for fragment in fragments]
        frames.append(frame({"type": "content_block_stop", "index": index},
                            "content_block_stop"))
    frames.append(frame({"type": "message_delta",
                         "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                         "usage": {"output_tokens": usage["output_tokens"]}}, "message_delta"))
    frames.append(frame({"type": "message_stop"}, "message_stop"))
    return frames


def stream_error(kind: str) -> Frame:
    return frame({"type": "error", "error": {"type": kind, "message": f"fake {kind}"}},
                 "error")
