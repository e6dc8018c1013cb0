"""The sandbox's notion of "now", injectable so tests can move time instead of sleeping."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Unix time in seconds, as the fake providers see it."""

    def now(self) -> float: ...


class SystemClock:
    """Real time: what `reconciler sandbox` and demos run on."""

    def now(self) -> float:
        return time.time()


class ManualClock:
    """Time that moves only when a test says so, from any thread."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._lock = threading.Lock()
        self._now = start

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


def rfc3339(unix_s: float) -> str:
    """The UTC timestamp format Postmark and GitHub answer with."""
    stamp = datetime.fromtimestamp(unix_s, UTC).isoformat(timespec="microseconds")
    return stamp.replace("+00:00", "Z")
