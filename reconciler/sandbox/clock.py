"""The sandbox's notion of "now", injectable so tests can move time instead of sleeping.

`ManualClock` is the one manual clock of the project (`reconciler.testing` exports it): the
ledger, the probes and the sweeper read it as a `() -> datetime` callable, the sandbox reads the
same instant in Unix seconds through `now()`, so one `advance` moves every party at once.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

#: Where a `ManualClock` starts unless told otherwise.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class Clock(Protocol):
    """Unix time in seconds, as the fake providers see it."""

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


def _aware(when: datetime) -> datetime:
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"a clock needs a timezone-aware time, got {when.isoformat()}")
    return when.astimezone(UTC)


def rfc3339(unix_s: float) -> str:
    """The UTC timestamp format Postmark and GitHub answer with."""
    stamp = datetime.fromtimestamp(unix_s, UTC).isoformat(timespec="microseconds")
    return stamp.replace("+00:00", "Z")
