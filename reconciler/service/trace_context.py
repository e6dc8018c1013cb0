"""The sidecar's side of the worker's trace: each call that records or decides something about
an operation is a server span, a child of the span the worker sent it from (W3C
`traceparent`, injected by the Python client: reconciler.infra.tracing.traced), named as the
worker's client span is (reconciler.intent, .attempt, .evidence, .retry_check, .reconcile) and
attributed with the verdict it answered. The probe reads and verdict changes it causes are its
children (reconciler.ledger.sweep, reconciler.service.wiring). Off unless the `OTEL_*` variables
name an exporter (reconciler.infra.tracing.configure_from_env).
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reconciler.infra import tracing

#: POST route -> span name; the operation id is the path's part after /v1/operations/.
_ROUTES = {
    "/v1/operations": "reconciler.intent",
    "/v1/operations/{operation_id}/attempts": "reconciler.attempt",
    "/v1/operations/{operation_id}/evidence": "reconciler.evidence",
    "/v1/operations/{operation_id}/retry": "reconciler.retry_check",
    "/v1/operations/{operation_id}/reconcile": "reconciler.reconcile",
}
_OPERATION = re.compile(r"^/v1/operations/([^/]+)(/[a-z]+)$")
#: A response larger than this is not read for its verdict (an operation's is far smaller).
_MAX_READ = 256 * 1024


def _route(method: str, path: str) -> tuple[str, str, str | None] | None:
    """(span name, route, operation id) of a call that records or decides; else None."""
    if method != "POST":
        return None
    found = _OPERATION.match(path)
    route = f"/v1/operations/{{operation_id}}{found.group(2)}" if found else path
    name = _ROUTES.get(route)
    return (name, route, unquote(found.group(1)) if found else None) if name else None


def _verdict(body: bytes) -> dict[str, Any]:
    """The verdict an answer carries (an operation, or a retry answer), as span attributes."""
    try:
        answer = json.loads(body)
    except ValueError:
        return {}
    if not isinstance(answer, dict):
        return {}
    intent = answer.get("intent")
    return {"reconciler.operation_id": intent.get("operation_id")
            if isinstance(intent, dict) else None,
            "reconciler.verdict": answer.get("verdict"),
            "reconciler.findings": answer.get("findings"),
            "reconciler.next_action": answer.get("next_action"),
            "reconciler.escalated": answer.get("escalated"),
            "reconciler.retry.allowed": answer.get("allowed")}


class TraceContext:
    """ASGI middleware: the server span of each operation call, in the caller's trace."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.on = tracing.enabled()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = _route(scope["method"], scope["path"]) if (
            self.on and scope["type"] == "http") else None
        if route is None:
            await self.app(scope, receive, send)
            return
        name, template, operation_id = route
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        body = bytearray()
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and len(body) < _MAX_READ:
                body.extend(message.get("body", b""))
            await send(message)

        with tracing.span(name, {"reconciler.operation_id": operation_id,
                                 "http.request.method": "POST", "http.route": template},
                          kind="server", context=tracing.extract(headers)) as current:
            await self.app(scope, receive, sending)
            tracing.annotate(current, {"http.response.status_code": status,
                                       **(_verdict(bytes(body)) if status < 300 else {})})
