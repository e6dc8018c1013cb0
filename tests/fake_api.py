"""What the local fakes of model APIs share: scripted failures, requests held open, and answers
streamed as server-sent events that a test can break or stall.

A streamed answer is a list of frames, each marked whether it carries a delta of the answer, so
that a fault can be placed relative to the deltas: `break_stream(after=N)` ends the stream with
the provider's error event once N deltas went out; `stall()` sends the first delta, then keeps
the stream open until the client goes away (and notes that it did).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

HOLD_LIMIT_S = 10.0


@dataclass
class Received:
    headers: dict[str, str]
    body: Any


@dataclass
class Failure:
    status: int
    retry_after: str | None = None


@dataclass(frozen=True)
class Frame:
    data: bytes
    delta: bool = False


def frame(data: dict[str, Any] | str, event: str | None = None, *, delta: bool = False) -> Frame:
    """One SSE event: an optional `event:` line, then the data (JSON unless a string)."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return Frame(f"{head}data: {text}\n\n".encode(), delta)


def pieces(text: str, size: int = 4) -> list[str]:
    """`text` cut into the small fragments a provider streams (at least one, maybe empty)."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


@dataclass
class FakeApi:
    """A fake's state, shared between the test (any thread) and the server's loop."""

    key: str = ""
    url: str = ""
    requests: list[Received] = field(default_factory=list)
    failures: deque[Failure] = field(default_factory=deque)
    hold_next: bool = False
    stall_next: bool = False
    break_after: int | None = None
    break_error: str = ""
    held: threading.Event = field(default_factory=threading.Event)
    disconnected: threading.Event = field(default_factory=threading.Event)

    def fail(self, *statuses: int, retry_after: str | None = None) -> None:
        """Answer the next requests with these error statuses, in order, before any reply."""
        self.failures.extend(Failure(status, retry_after) for status in statuses)

    def hold(self) -> None:
        """Keep the next (unstreamed) request open, up to HOLD_LIMIT_S, until its client
        disconnects."""
        self.hold_next = True

    def stall(self) -> None:
        """Stream the next answer's first delta, then hold the stream open (up to HOLD_LIMIT_S)
        until its client disconnects."""
        self.stall_next = True

    def break_stream(self, *, after: int, error: str) -> None:
        """End the next streamed answer with an error event of type (or code) `error` once
        `after` deltas were sent."""
        self.break_after, self.break_error = after, error

    async def record(self, request: Request) -> Any:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        self.requests.append(Received(dict(request.headers), body))
        return body

    async def scripted_failure(self, request: Request,
                               error: Callable[[int, str, dict[str, str] | None], Response],
                               ) -> Response | None:
        """The answer a held request (`hold`) or a queued failure (`fail`) gets instead of its
        reply, as the fake's own `error` shapes it; None when neither is scripted."""
        if self.hold_next:
            self.hold_next = False
            await self.held_open(request)
            return error(500, "held request released", None)
        if self.failures:
            failure = self.failures.popleft()
            return error(failure.status, f"fake failure {failure.status}",
                         {"retry-after": failure.retry_after} if failure.retry_after else None)
        return None

    async def held_open(self, request: Request) -> None:
        """Hold `request` (a held request, or a stalled stream) until its client goes away,
        up to HOLD_LIMIT_S."""
        self.held.set()
        deadline = time.monotonic() + HOLD_LIMIT_S
        while time.monotonic() < deadline:
            if await request.is_disconnected():
                self.disconnected.set()
                return
            await asyncio.sleep(0.01)

    def streamed(self, request: Request, frames: Sequence[Frame],
                 error_frame: Callable[[str], Frame]) -> StreamingResponse:
        """`frames` as an SSE response, with the fault the test asked for applied."""
        stall, self.stall_next = self.stall_next, False
        break_after, self.break_after = self.break_after, None
        return StreamingResponse(self._frames(request, frames, stall, break_after, error_frame),
                                 media_type="text/event-stream",
                                 headers={"cache-control": "no-cache"})

    async def _frames(self, request: Request, frames: Sequence[Frame], stall: bool,
                      break_after: int | None,
                      error_frame: Callable[[str], Frame]) -> AsyncIterator[bytes]:
        sent = 0
        finished = False
        try:
            for item in frames:
                if item.delta and break_after is not None and sent == break_after:
                    yield error_frame(self.break_error).data
                    finished = True
                    return
                yield item.data
                sent += item.delta
                if stall and sent == 1 and item.delta:
                    await self.held_open(request)
                    finished = True
                    return
            finished = True
        finally:
            if not finished:  # the client went away while frames were being sent
                self.disconnected.set()
