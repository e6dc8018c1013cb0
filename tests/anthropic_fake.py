"""A local fake of Anthropic's Messages API (POST /v1/messages), for the adapter's tests.

Close to the real API where an adapter could get it wrong: the x-api-key and anthropic-version
headers, the request body (required fields, tool_use/tool_result pairing), the response and
error JSON shapes, retry-after on 429. Tests script the answers (`reply`), inject failures
(`fail`), and `hold` a request open until the client goes away. Every request is recorded.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from service_harness import serving

KEY = "sk-ant-fake-0123456789abcdef"
VERSION = "2023-06-01"
#: The error type the real API sends with each status.
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 429: "rate_limit_error",
               500: "api_error", 529: "overloaded_error"}
HOLD_LIMIT_S = 10.0


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
class Received:
    headers: dict[str, str]
    body: Any


@dataclass
class Failure:
    status: int
    retry_after: str | None = None


@dataclass
class FakeAnthropic:
    """The fake's state, shared between the test (any thread) and the server's loop."""

    key: str = KEY
    url: str = ""
    requests: list[Received] = field(default_factory=list)
    replies: deque[dict[str, Any]] = field(default_factory=deque)
    failures: deque[Failure] = field(default_factory=deque)
    hold_next: bool = False
    held: threading.Event = field(default_factory=threading.Event)
    disconnected: threading.Event = field(default_factory=threading.Event)

    def reply(self, content: list[dict[str, Any]], *, stop_reason: str = "end_turn",
              usage: dict[str, Any] | None = None) -> None:
        """Queue the next successful answer (content blocks in wire JSON)."""
        self.replies.append({"content": content, "stop_reason": stop_reason,
                             "usage": usage or {"input_tokens": 12, "output_tokens": 3}})

    def fail(self, *statuses: int, retry_after: str | None = None) -> None:
        """Answer the next requests with these error statuses, in order, before any reply."""
        self.failures.extend(Failure(status, retry_after) for status in statuses)

    def hold(self) -> None:
        """Keep the next request open (up to HOLD_LIMIT_S) until its client disconnects."""
        self.hold_next = True


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
    async def messages(request: Request) -> JSONResponse:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        fake.requests.append(Received(dict(request.headers), body))
        if request.headers.get("x-api-key") != fake.key:
            return error(401, "invalid x-api-key")
        if request.headers.get("anthropic-version") is None:
            return error(400, "anthropic-version: header is required")
        if problem := _invalid(raw):
            return error(400, problem)
        if fake.hold_next:
            fake.hold_next = False
            return await _held(request, fake)
        if fake.failures:
            failure = fake.failures.popleft()
            return error(failure.status, f"fake failure {failure.status}",
                         {"retry-after": failure.retry_after} if failure.retry_after else None)
        answer = fake.replies.popleft() if fake.replies else {
            "content": [{"type": "text", "text": "(no scripted reply)"}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}}
        return JSONResponse({"id": f"msg_fake_{len(fake.requests)}", "type": "message",
                             "role": "assistant", "model": body["model"],
                             "stop_sequence": None, **answer})

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


async def _held(request: Request, fake: FakeAnthropic) -> JSONResponse:
    fake.held.set()
    deadline = time.monotonic() + HOLD_LIMIT_S
    while time.monotonic() < deadline:
        if await request.is_disconnected():
            fake.disconnected.set()
            break
        await asyncio.sleep(0.01)
    return error(500, "held request released")
