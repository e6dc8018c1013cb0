"""HTTP request counts and latencies, by method, route template and status.

An ASGI middleware outside everything else, so that answers made before routing (a refused
token, a body too large) and the safety net's 500 are counted too. The route label is the
template the router matched (`/v1/operations/{operation_id}`), never the raw path: ids would
make one time series per operation. What no route matched is `<unmatched>`; a mounted app
(static files) is its mount path.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reconciler.infra.metrics import HTTP_DURATION, HTTP_REQUESTS

UNMATCHED = "<unmatched>"


def route_of(scope: Scope) -> str:
    """The template of the route that served `scope` (set by the router as it matched)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    mounted = scope.get("root_path", "")
    return f"{mounted}/{{path}}" if mounted else UNMATCHED


class HttpMetrics:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # an app that raised before answering: the server answers 500

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            route, method = route_of(scope), scope["method"]
            HTTP_REQUESTS.labels(method, route, str(status)).inc()
            HTTP_DURATION.labels(method, route).observe(time.perf_counter() - started)
