"""What a request must be before the service spends anything on it: addressed to this service
(Host, Origin), with few headers, and within the cap on requests in flight.

A web page the operator visits can make the browser send requests to 127.0.0.1 under a host name
the page's author controls (DNS rebinding), or from its own origin (CSRF): the Host must be one
of the names the service is configured with, and an Origin, when a browser sends one, must name
one of them too. Overload is answered at once with 503 and Retry-After rather than by queueing
until every client times out.
"""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from reconciler.service.problems import ProblemType, problem_response

UNKNOWN_HOST = ProblemType("unknown-host", 421, "Not a host name this service answers to")
CROSS_ORIGIN = ProblemType("cross-origin", 403, "Requests from this origin are refused")
TOO_MANY_HEADERS = ProblemType("too-many-headers", 431, "Too many request header fields")
OVERLOADED = ProblemType("overloaded", 503, "Too many requests in flight")

#: Liveness answers even under overload: an orchestrator must not restart a busy service.
UNCAPPED_PATHS = frozenset({"/healthz"})


def host_name(authority: str) -> str:
    """The name in a Host header or an origin's authority, without port or brackets."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority[1:].partition("]")[0]
    name, _, port = authority.rpartition(":")
    return name if name and port.isdigit() else authority


class Admission:
    """Checks Host, Origin and the header count, and caps the requests in flight."""

    def __init__(self, app: ASGIApp, hosts: Collection[str], max_headers: int,
                 max_concurrency: int, retry_after_s: int = 1) -> None:
        self.app = app
        self.hosts = frozenset(hosts)
        self.max_headers = max_headers
        self.max_concurrency = max_concurrency
        self.retry_after = str(retry_after_s)
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            kind, detail = refusal
            headers = {"Retry-After": self.retry_after} if kind is OVERLOADED else None
            await problem_response(kind, detail, scope["path"], headers=headers)(
                scope, receive, send)
            return
        counted = scope["path"] not in UNCAPPED_PATHS
        # One event loop runs every request: the counter needs no lock.
        self.in_flight += counted
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= counted

    def _refusal(self, scope: Scope) -> tuple[ProblemType, str] | None:
        if len(scope["headers"]) > self.max_headers:
            return TOO_MANY_HEADERS, f"send at most {self.max_headers} header fields"
        headers = Headers(scope=scope)
        if self.hosts:
            host = host_name(headers.get("host", ""))
            if host not in self.hosts:
                return UNKNOWN_HOST, ("the Host header names no host this service is "
                                      "configured for (allowed_hosts)")
            origin = headers.get("origin")
            if origin is not None and host_name(urlsplit(origin).netloc) not in self.hosts:
                return CROSS_ORIGIN, "the Origin is not one of the service's own hosts"
        if scope["path"] not in UNCAPPED_PATHS and self.in_flight >= self.max_concurrency:
            return OVERLOADED, (f"{self.max_concurrency} requests are in flight; try again "
                                f"after {self.retry_after} s")
        return None
