"""Fault injection on writes (`X-Sandbox-Fault`), one pipeline for all five providers.

A write runs: delay, then fail_before_commit, then server_error (the endpoint fails once it has
started: nothing stored, a 500 that a provider with idempotency keys saves and replays), then
the commit (ack_no_effect stores nothing, duplicate stores two), then the answer is lost,
turned into a 502, or given.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Header, Request
from fastapi.responses import JSONResponse

from reconciler.sandbox.state import SandboxState
from reconciler.sandbox.wire import ProviderError

#: Paths served at the host's root, by the provider root they belong to (Postmark's).
_ROOT_OF = {"email": "mail", "messages": "mail"}

_FLAGS = frozenset(
    {"lose_response", "error_after_commit", "duplicate", "ack_no_effect", "fail_before_commit",
     "server_error"}
)


@dataclass(frozen=True, slots=True)
class Faults:
    delay_s: float = 0.0
    lose_response: bool = False
    error_after_commit: bool = False
    duplicate: bool = False
    ack_no_effect: bool = False
    fail_before_commit: bool = False
    server_error: bool = False

    @property
    def copies(self) -> int:
        """How many objects the commit stores."""
        if self.ack_no_effect:
            return 0
        return 2 if self.duplicate else 1


def parse_faults(header: str) -> Faults:
    """`delay=0.2,error_after_commit` -> Faults; a typo is an error, not a silent no-fault."""
    flags: set[str] = set()
    delay_s = 0.0
    for item in header.split(","):
        name, has_value, value = item.strip().partition("=")
        if name == "delay" and has_value:
            delay_s = _delay_seconds(value)
        elif name in _FLAGS and not has_value:
            flags.add(name)
        else:
            known = ", ".join(sorted(_FLAGS | {"delay=<seconds>"}))
            raise ProviderError(400, {"error": f"unknown fault {item.strip()!r}; known: {known}"})
    return Faults(
        delay_s=delay_s,
        lose_response="lose_response" in flags,
        error_after_commit="error_after_commit" in flags,
        duplicate="duplicate" in flags,
        ack_no_effect="ack_no_effect" in flags,
        fail_before_commit="fail_before_commit" in flags,
        server_error="server_error" in flags,
    )


def _delay_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ProviderError(400, {"error": f"delay needs seconds >= 0, got {value!r}"})
    return seconds


async def requested_faults(request: Request,
                           x_sandbox_fault: Annotated[str | None, Header()] = None) -> Faults:
    """Dependency: the faults a write asked for (the header), else those armed for the next
    write under its provider's root (`POST /_sandbox/faults`), else none."""
    if x_sandbox_fault is None:
        state: SandboxState = request.app.state.sandbox
        root = request.url.path.strip("/").split("/")[0]
        x_sandbox_fault = state.take_armed(_ROOT_OF.get(root, root))
    return Faults() if x_sandbox_fault is None else parse_faults(x_sandbox_fault)


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
