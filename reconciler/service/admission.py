"""What a request must be before the service spends anything on it: addressed to this service
(Host, Origin), with few headers, and within the cap on requests in flight.

A web page the operator visits can make the browser send requests to 127.0.0.1 under a host name
the page's author controls (DNS rebinding), or from its own origin (CSRF): the Host must be one
of the names the service is configured with, and an Origin, when a browser sends one, must name
one of them too. Overload is answered at once with 503 and Retry-After rather than by queueing
until every client times out.

The hot routes (recording intents and attempts, the retry check, reading an operation) have a
tighter bound of their own, `HotQueue`: their requests wait on the store's one writer (group
commit), so the cap on all requests in flight lets a queue of them build that takes seconds to
drain after a stall (an fsync spike, a collection pause: bench/README.md, issue 35). Past
`hot_queue_max` of them waiting, or while the oldest has waited `hot_queue_wait_s`, a new one is
refused with 503 `overloaded` and Retry-After before anything of it is read or recorded, so a
client may send it again as it is (reconciler.client does, within its own deadline).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Collection
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import Response
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


class HotQueue:
    """The bound on the hot routes' requests in flight (module doc). One event loop runs every
    request: no lock. `admit` before the request's work, `leave` with its ticket after."""

    def __init__(self, limit: int, max_wait_s: float, retry_after_s: int = 1) -> None:
        self.limit = limit
        self.max_wait_s = max_wait_s
        self.retry_after = str(retry_after_s)
        self.in_flight = 0
        #: Every admitted request, oldest first; finished ones are dropped from the left when a
        #: newcomer looks at the oldest (requests end nearly in arrival order, one group commit
        #: batch after another, so few finished ones wait there).
        self._arrivals: deque[Arrival] = deque()

    def admit(self, path: str) -> Arrival | Response:
        """A ticket for `leave`, or the 503 to answer at once."""
        now = time.monotonic()
        arrivals = self._arrivals
        while arrivals and arrivals[0].done:
            arrivals.popleft()
        if self.in_flight >= self.limit:
            detail = f"{self.limit} requests to the hot routes are in flight"
        elif arrivals and now - arrivals[0].at > self.max_wait_s:
            detail = f"the oldest request in flight has waited over {self.max_wait_s:g} s"
        else:
            ticket = Arrival(now)
            arrivals.append(ticket)
            self.in_flight += 1
            return ticket
        return problem_response(OVERLOADED, f"{detail}; try again after {self.retry_after} s",
                                path, headers={"Retry-After": self.retry_after})

    def leave(self, ticket: Arrival) -> None:
        ticket.done = True
        self.in_flight -= 1


class Arrival:
    """One admitted hot request: when it came, and whether it is done."""

    __slots__ = ("at", "done")

    def __init__(self, at: float) -> None:
        self.at = at
        self.done = False
