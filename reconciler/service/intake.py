"""What a request body must be before anything parses it: small, and JSON.

An oversized body is refused from its Content-Length before a byte of it is read; a body sent
without one (chunked) is counted as it streams and cut off at the limit. Either way the answer is
a 413 problem, and the parser never holds more than the limit in memory. A body that stops
arriving for `read_timeout_s` is a 408 (cut off within a tick of its deadline: `_Deadlines`).
Paths under `forms_under` (the operator console; Twilio's status callbacks) also take form posts
(urlencoded), no larger.
"""

from __future__ import annotations

import asyncio
import weakref

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reconciler.service.problems import (
    BAD_REQUEST,
    PAYLOAD_TOO_LARGE,
    UNSUPPORTED_MEDIA_TYPE,
    problem_response,
)


def is_json(content_type: str) -> bool:
    media = content_type.partition(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/")
                                           and media.endswith("+json"))


FORM = "application/x-www-form-urlencoded"


class BodyIntake:
    def __init__(self, app: ASGIApp, max_body_bytes: int, read_timeout_s: float = 10.0,
                 forms_under: str | tuple[str, ...] | None = None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.read_timeout_s = read_timeout_s
        self.forms_under = forms_under
        #: Per event loop (an app may be served on more than one, a test's and a server's).
        self._deadlines: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Deadlines] = (
            weakref.WeakKeyDictionary())

    def _accepted(self, scope: Scope, content_type: str) -> bool:
        if is_json(content_type):
            return True
        return (self.forms_under is not None and scope["path"].startswith(self.forms_under)
                and content_type.partition(";")[0].strip().lower() == FORM)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        length = headers.get("content-length")
        refusal = None
        if length is not None and not length.strip().isdigit():
            refusal = (BAD_REQUEST, "Content-Length is not a number")
        elif length is not None and int(length) > self.max_body_bytes:
            refusal = (PAYLOAD_TOO_LARGE, f"the body exceeds {self.max_body_bytes} bytes")
        elif (length not in (None, "0") or "transfer-encoding" in headers) and not \
                self._accepted(scope, headers.get("content-type", "")):
            refusal = (UNSUPPORTED_MEDIA_TYPE, "send the body as application/json")
        if refusal is not None:
            await problem_response(*refusal, scope["path"])(scope, receive, send)
            return
        await self.app(scope, self._counting(receive), send)

    def _counting(self, receive: Receive) -> Receive:
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            loop = asyncio.get_running_loop()
            deadlines = self._deadlines.get(loop)
            if deadlines is None:
                deadlines = self._deadlines[loop] = _Deadlines(self.read_timeout_s)
            try:
                # A body trickled in a byte at a time would hold a worker for good.
                message = await deadlines.read(receive)
            except TimeoutError:
                raise HTTPException(408, f"no body bytes for {self.read_timeout_s} s") from None
            seen += len(message.get("body", b""))
            if seen > self.max_body_bytes:
                # FastAPI re-raises HTTPException from body reading; the 413 handler answers.
                raise HTTPException(413, f"the body exceeds {self.max_body_bytes} bytes")
            return message

        return counted


class _Deadlines:
    """The body reads under way on one event loop, and one timer for all of them: every
    `tick_s` it cancels the reads that have waited past `timeout_s`, and each of those raises
    TimeoutError where it awaited (as `asyncio.timeout` has it, whose logic this follows: a
    task also cancelled by someone else stays cancelled).

        read ── waiting[task] = now + timeout_s ─────────────── the message ── entry gone
        tick ────────── tick ────────── tick: a deadline passed ─▶ task.cancel() ─▶ TimeoutError

    Why not `asyncio.timeout` around each read: it arms a loop timer and cancels it again for
    every body, 5.3-6.3 us of CPU a read on uvloop against 0.25-0.43 for the read alone
    (bench/README.md, http); here a read costs two dict operations, and the timer
    runs only while reads wait. The price: a stalled body is cut off up to `tick_s` after its
    deadline (at most a quarter of the timeout, and at most a second), not at it.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.tick_s = min(1.0, timeout_s / 4)
        self._waiting: dict[asyncio.Task[object], float] = {}
        self._expired: set[asyncio.Task[object]] = set()
        self._timer: asyncio.TimerHandle | None = None

    async def read(self, receive: Receive) -> Message:
        """`await receive()`, or TimeoutError once it has waited `timeout_s` (and a tick)."""
        task = asyncio.current_task()
        if task is None:  # not run by a task: nothing this could cancel
            async with asyncio.timeout(self.timeout_s):
                return await receive()
        loop = asyncio.get_running_loop()
        self._waiting[task] = loop.time() + self.timeout_s
        if self._timer is None:
            self._timer = loop.call_later(self.tick_s, self._check)
        try:
            return await receive()
        except asyncio.CancelledError:
            if task in self._expired and task.uncancel() == 0:
                raise TimeoutError from None
            raise
        finally:
            del self._waiting[task]
            self._expired.discard(task)

    def _check(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        for task, deadline in self._waiting.items():
            if deadline <= now and task not in self._expired:
                self._expired.add(task)
                task.cancel()  # delivered where the task awaits its read, when it next runs
        self._timer = loop.call_later(self.tick_s, self._check) if self._waiting else None
