"""The clocks: real time, and the manual clocks tests move instead of sleeping.

Low in the shell so that every part reading time can take one: the ledger, the sweep and the
probes read a `() -> datetime` callable, the sandbox a `Clock` (Unix seconds through `now()`),
deadlines and budgets a `() -> float` monotonic callable. `ManualClock` serves the first two at
once (one `advance` moves every party), `ManualMonotonic` the third; `reconciler.testing`
exports both as the testing kit's clocks.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

#: Where a `ManualClock` starts unless told otherwise.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class Clock(Protocol):
    """Unix time in seconds, as the sandbox's fake providers see it."""

    def now(self) -> float: ...


class SystemClock:
    """Real time: what `reconciler sandbox` and demos run on."""

    def now(self) -> float:
        return time.time()


class ManualClock:
    """Timezone-aware UTC time that moves only when a test says so, from any thread.

    `step` moves it forward after every reading: with a step, facts recorded one after
    another get strictly increasing times (an observation is after the dispatch it follows)
    without the test advancing between them.
    """

    def __init__(self, start: datetime = EPOCH, *, step: timedelta = timedelta(0)) -> None:
        if step < timedelta(0):
            raise ValueError("a clock's step cannot go backwards")
        self._lock = threading.Lock()
        self._now = _aware(start)
        self._step = step

    def __call__(self) -> datetime:
        with self._lock:
            self._now += self._step
            return self._now

    def now(self) -> float:
        """The sandbox's reading (`Clock`): the same instant, in Unix seconds."""
        return self().timestamp()

    def advance(self, seconds: float) -> None:
        """Move forward by `seconds` (never back: nothing waits for a clock to rewind)."""
        if seconds < 0:
            raise ValueError(f"cannot advance a clock by {seconds} s")
        with self._lock:
            self._now += timedelta(seconds=seconds)

    def set(self, when: datetime) -> None:
        """Jump to `when`, forward or back: replaying recorded facts sets their own times."""
        with self._lock:
            self._now = _aware(when)


class ManualMonotonic:
    """A `time.monotonic` stand-in that moves only when a test says so, from any thread.

    Call it for the reading (pass it where code takes a `monotonic` callable, e.g.
    `probes.budget.Budget(monotonic=...)`); `advance` moves it; `sleep` moves it at once by the
    time asked and notes the request in `slept`, for code that takes a `sleep` beside its
    clock. It starts at an arbitrary 1000 s, as the real one starts at an arbitrary point: only
    differences between readings mean anything.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._lock = threading.Lock()
        self._now = start
        self.slept: list[float] = []

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move forward by `seconds` (a monotonic clock never goes back)."""
        if seconds < 0:
            raise ValueError(f"cannot advance a monotonic clock by {seconds} s")
        with self._lock:
            self._now += seconds

    def sleep(self, seconds: float) -> None:
        """Sleep without waiting: the time passes at once."""
        self.advance(seconds)
        with self._lock:
            self.slept.append(seconds)


def _aware(when: datetime) -> datetime:
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"a clock needs a timezone-aware time, got {when.isoformat()}")
    return when.astimezone(UTC)
