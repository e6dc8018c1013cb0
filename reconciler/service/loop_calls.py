"""Synchronous ledger calls run on the event loop, in greenlets kept for the next call.

SQLAlchemy's `greenlet_spawn` (sqlalchemy/util/concurrency.py) makes a new greenlet for every
call: most of its cost. On this machine (uvloop, warm), a call that waits once through `await_`
cost 10.4 us of CPU that way and 3.1 us in a greenlet taken back from the idle ones; a call
that never waits, 6.7 us against 0.8. Everything else is as `greenlet_spawn` does it: the
function runs in a greenlet that SQLAlchemy's `await_` accepts (the marker attribute it
checks), which hands each awaitable to the caller's coroutine and gets back its result or its
exception; contextvars are the caller's (the greenlet runs in the caller's context, as
`greenlet_spawn` sets `gr_context`).

    coroutine ── switch(fn, args) ──▶ runner: fn(*args) ... await_(x) ── x ──▶ coroutine
    coroutine ◀─ awaits x ──────────────────────────────────────────────────────┘
    coroutine ── switch(result of x) ──▶ runner: ... fn returns ── _DONE ────▶ coroutine
                                         (runner idle: back in the pool, parked in _serve)

A runner whose call is done waits in `_serve` for the next one, holding nothing of the last
(its caller takes the outcome off it). Each thread has its own pool: a greenlet runs only in
the thread that made it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar, TypeVarTuple

from greenlet import getcurrent, greenlet

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: Idle runners kept per thread; past it a finished runner is left to the garbage collector.
#: More calls than this in flight at once (each waiting on a commit) make new ones.
MAX_IDLE = 256


class _Runner(greenlet):  # type: ignore[misc]
    """A greenlet SQLAlchemy's `await_` may wait in (sqlalchemy.util.concurrency.in_greenlet).
    `value` or `error`: the last call's outcome, until its caller takes it."""

    __sqlalchemy_greenlet_provider__ = True

    def __init__(self) -> None:
        super().__init__(_serve)
        self.value: Any = None
        self.error: BaseException | None = None
        self.switch()  # parked in _serve, waiting for its first call


#: What a runner switches back with when its call is done (its outcome is on the runner: an
#: argument of the switch would stay on the parked frame's stack, and alive with it).
_DONE = object()


def _serve() -> None:
    """A runner's whole life: wait for a call, run it, leave its outcome, and so on."""
    me = getcurrent()
    while True:
        fn, args = me.parent.switch(_DONE)
        try:
            me.value = fn(*args)
        except BaseException as exc:  # handed to the caller, who raises it
            me.error = exc
        del fn, args


_idle = threading.local()


async def call_in_greenlet(fn: Callable[[*Ts], T], *args: *Ts) -> T:
    """`fn(*args)`, run on the calling thread in a greenlet where SQLAlchemy's `await_` hands
    what it awaits to this coroutine: `greenlet_spawn`, with the greenlet reused."""
    pool: list[_Runner] = _idle.__dict__.setdefault("runners", [])
    runner = pool.pop() if pool else _Runner()
    caller = getcurrent()
    runner.parent = caller
    runner.gr_context = caller.gr_context
    result: Any = runner.switch(fn, args)
    while result is not _DONE:
        try:
            value = await result
        except BaseException:  # cancelled, or the awaitable failed: raised where it awaited
            result = runner.throw(*sys.exc_info())
        else:
            result = runner.switch(value)
    answer: T = runner.value
    error, runner.value, runner.error, runner.gr_context = runner.error, None, None, None
    if len(pool) < MAX_IDLE:
        pool.append(runner)
    if error is not None:
        raise error
    return answer
