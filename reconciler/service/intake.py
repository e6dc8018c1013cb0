"""What a request body must be before anything parses it: small, and JSON.

An oversized body is refused from its Content-Length before a byte of it is read; a body sent
without one (chunked) is counted as it streams and cut off at the limit. Either way the answer is
a 413 problem, and the parser never holds more than the limit in memory. A body that stops
arriving for `read_timeout_s` is a 408. Paths under `forms_under` (the operator console) also
take HTML form posts (urlencoded), no larger.
"""

from __future__ import annotations

import asyncio

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
                 forms_under: str | None = None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.read_timeout_s = read_timeout_s
        self.forms_under = forms_under

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
            try:
                # A body trickled in a byte at a time would hold a worker for good.
                async with asyncio.timeout(self.read_timeout_s):
                    message = await receive()
            except TimeoutError:
                raise HTTPException(408, f"no body bytes for {self.read_timeout_s} s") from None
            seen += len(message.get("body", b""))
            if seen > self.max_body_bytes:
                # FastAPI re-raises HTTPException from body reading; the 413 handler answers.
                raise HTTPException(413, f"the body exceeds {self.max_body_bytes} bytes")
            return message

        return counted
