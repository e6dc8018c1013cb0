"""A request id for every request, and the access log: one line per request, its facts as fields.

    {"logger": "reconciler.access", "message": "GET /v1/operations 200", "method": "GET",
     "path": "/v1/operations", "query": "verdict=indeterminate&token=***", "status": 200,
     "duration_ms": 1.84, "request_id": "9f2c...", "client": "127.0.0.1"}

The id is the caller's `X-Request-Id` when it is a sane one (short, no spaces or controls: it
goes into logs), else a new one; either way it is echoed in the answer's `X-Request-Id`, and
every line logged while the request is served carries it (`reconciler.infra.logs.REQUEST_ID`), the
safety net's traceback included. The query string is logged with the value of any parameter
whose name says token, key, secret, password, signature or code masked; the path has no
secrets (ids and names only).

Outermost, so that what is answered before routing (a refused Host or token, a body too
large) and the safety net's 500 are logged too. It replaces uvicorn's access line (a text
string with the query string as sent).
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reconciler.infra.logs import REQUEST_ID, masked_query

log = logging.getLogger("reconciler.access")

HEADER = b"x-request-id"
#: What an incoming id may be: what request-id generators produce (UUIDs, hex, base64,
#: ULIDs, `trace-span` pairs), and nothing a log reader could mistake for structure.
_SANE_ID = re.compile(rb"[A-Za-z0-9._:+/=-]{1,128}")


def request_id_of(scope: Scope) -> str:
    """The caller's X-Request-Id when sane, else a new one."""
    for name, value in scope["headers"]:
        if name == HEADER and _SANE_ID.fullmatch(value):
            return bytes(value).decode("ascii")
    return uuid.uuid4().hex


class RequestLog:
    """Tags the request with its id, echoes it, and logs the access line (with `enabled`)."""

    def __init__(self, app: ASGIApp, *, enabled: bool = True) -> None:
        self.app = app
        self.enabled = enabled

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = request_id_of(scope)
        token = REQUEST_ID.set(request_id)
        status = 500  # an app that raised before answering: the server answers 500

        async def tagged(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message["headers"] = [*message.get("headers", ()),
                                      (HEADER, request_id.encode("ascii"))]
            await send(message)

        try:
            await self.app(scope, receive, tagged)
        finally:
            if self.enabled:
                self._line(scope, status, time.perf_counter() - started, request_id)
            REQUEST_ID.reset(token)

    @staticmethod
    def _line(scope: Scope, status: int, elapsed_s: float, request_id: str) -> None:
        method, path = scope["method"], scope["path"]
        client = scope.get("client")
        log.info("%s %s %d", method, path, status, extra={
            "method": method, "path": path,
            "query": masked_query(scope.get("query_string", b"").decode("latin-1")),
            "status": status, "duration_ms": round(elapsed_s * 1000, 2),
            "request_id": request_id, "client": client[0] if client else None})
