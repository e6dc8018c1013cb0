"""Fault injection (`X-Sandbox-Fault`), one pipeline for all the providers.

A write runs: rate_limit (a 429, nothing done), delay, then fail_before_commit, then
server_error (the endpoint fails once it has started: nothing stored, a 500 that a provider
with idempotency keys saves and replays), then the commit (ack_no_effect stores nothing,
duplicate stores two), then the answer is lost, turned into a 502, or given. A read runs:
rate_limit, delay, then the endpoint, which cuts its answer short when asked (short_page,
incomplete_results).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Header, Request
from fastapi.responses import JSONResponse

from reconciler.sandbox.shapes import ProviderError, provider_root, rate_limited
from reconciler.sandbox.state import SandboxState

_FLAGS = frozenset(
    {"lose_response", "error_after_commit", "duplicate", "ack_no_effect", "fail_before_commit",
     "server_error", "short_page", "incomplete_results"}
)
#: Faults that take seconds: `delay=0.2`, `rate_limit=5` (the Retry-After asked for).
_TIMED = ("delay", "rate_limit")


@dataclass(frozen=True, slots=True)
class Faults:
    delay_s: float = 0.0
    lose_response: bool = False
    error_after_commit: bool = False
    duplicate: bool = False
    ack_no_effect: bool = False
    fail_before_commit: bool = False
    server_error: bool = False
    rate_limit_s: float = 0.0
    #: A Slack history page cut short, `has_more` and a cursor for the rest
    #: (https://docs.slack.dev/apis/web-api/pagination: "fewer results than your specified
    #: limit, even when there are additional results").
    short_page: bool = False
    #: A GitHub search that timed out: `incomplete_results: true` and only part of the matches
    #: (https://docs.github.com/rest/search/search#timeouts-and-incomplete-results).
    incomplete_results: bool = False

    @property
    def copies(self) -> int:
        """How many objects the commit stores."""
        if self.ack_no_effect:
            return 0
        return 2 if self.duplicate else 1


def holds_answer(header: str | None) -> bool:
    """Whether the faults in `header` keep the answer from a client for a while: it is lost
    (held, then dropped) or delayed. A client that means to wait for the answer gives such a
    request its short patience only where the scenario is that it gives up."""
    if header is None:
        return False
    faults = parse_faults(header)
    return faults.lose_response or faults.delay_s > 0


def parse_faults(header: str) -> Faults:
    """`delay=0.2,error_after_commit` -> Faults; a typo is an error, not a silent no-fault."""
    flags: set[str] = set()
    timed = dict.fromkeys(_TIMED, 0.0)
    for item in header.split(","):
        name, has_value, value = item.strip().partition("=")
        if name in timed and has_value:
            timed[name] = _seconds(name, value)
        elif name in _FLAGS and not has_value:
            flags.add(name)
        else:
            known = ", ".join(sorted(_FLAGS | {f"{t}=<seconds>" for t in _TIMED}))
            raise ProviderError(400, {"error": f"unknown fault {item.strip()!r}; known: {known}"})
    return Faults(
        delay_s=timed["delay"],
        rate_limit_s=timed["rate_limit"],
        short_page="short_page" in flags,
        incomplete_results="incomplete_results" in flags,
        lose_response="lose_response" in flags,
        error_after_commit="error_after_commit" in flags,
        duplicate="duplicate" in flags,
        ack_no_effect="ack_no_effect" in flags,
        fail_before_commit="fail_before_commit" in flags,
        server_error="server_error" in flags,
    )


def _seconds(name: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ProviderError(400, {"error": f"{name} needs seconds >= 0, got {value!r}"})
    return seconds


def is_read(request: Request) -> bool:
    """A read: a GET, or one of Slack's `conversations.*` methods (its SDK POSTs them)."""
    return request.method == "GET" or request.url.path.startswith("/chat/api/conversations.")


async def _faults(request: Request, header: str | None, side: str) -> Faults:
    """The faults the request asked for (the header), else those armed for the next `side`
    ("write" or "read") under its provider's root (`POST /_sandbox/faults`), else none; a
    rate limit answers at once, nothing done."""
    state: SandboxState = request.app.state.sandbox
    root = provider_root(request.url.path)
    if header is None:
        header = state.take_armed(root, side)
    faults = Faults() if header is None else parse_faults(header)
    if faults.rate_limit_s:
        raise rate_limited(root, faults.rate_limit_s, state.clock.now())
    return faults


async def requested_faults(request: Request,
                           x_sandbox_fault: Annotated[str | None, Header()] = None) -> Faults:
    """Dependency of a write: the faults it runs under."""
    return await _faults(request, x_sandbox_fault, "write")


async def read_faults(request: Request,
                      x_sandbox_fault: Annotated[str | None, Header()] = None) -> Faults:
    """Dependency of every provider route (a write gets no read faults): a read's faults,
    its delay already waited."""
    if not is_read(request):
        return Faults()
    faults = await _faults(request, x_sandbox_fault, "read")
    if faults.delay_s:
        await asyncio.sleep(faults.delay_s)
    return faults


#: A provider's own error answer for a status and a short message.
ErrorShape = Callable[[int, str], JSONResponse]


def plain_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status)


async def perform_write(
    state: SandboxState, faults: Faults, commit: Callable[[int], JSONResponse],
    error: ErrorShape = plain_error, save: Callable[[JSONResponse], None] | None = None,
) -> JSONResponse:
    """Run one write under its faults. `commit(copies)` stores that many objects and returns
    the normal answer, which shows the first one; `error` shapes the injected failures the way
    the provider shapes its own (so its SDK reads them as it would the provider's); `save`
    keeps the endpoint's own failure for replay (Stripe saves a 500 under its key)."""
    if faults.delay_s:
        await asyncio.sleep(faults.delay_s)
    if faults.fail_before_commit:
        return error(503, "service unavailable")
    if faults.server_error:
        failed = error(500, "An unknown error occurred")
        if save is not None:
            save(failed)
        return failed
    answer = commit(faults.copies)
    if faults.lose_response:
        await state.holds.hold(state.config.hold_s)
        # Reached only by a client more patient than hold_s, or when the server stops.
        return error(504, "response lost")
    if faults.error_after_commit:
        return error(502, "bad gateway")
    return answer
