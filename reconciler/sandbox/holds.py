"""Requests that `lose_response` keeps open, and ending them when the server stops.

A held request would otherwise keep uvicorn's graceful shutdown waiting for `hold_s`, so a test
that injected `lose_response` would stall its teardown.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class Holds:
    """Open holds, releasable from any thread (each hold wakes on its own event loop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._closed = False

    async def hold(self, seconds: float) -> None:
        """Wait `seconds`, or less if the holds are closed meanwhile (or already)."""
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            if self._closed:
                return
            self._waiting.add(entry)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(entry[1].wait(), seconds)
        finally:
            with self._lock:
                self._waiting.discard(entry)

    def open(self) -> None:
        """Let requests be held again (a server is starting on this state)."""
        with self._lock:
            self._closed = False

    def close(self) -> None:
        """End every hold now, and every hold that starts until `open` (a server is stopping:
        a request still in its `delay` when shutdown begins must not start a fresh hold)."""
        with self._lock:
            self._closed = True
            for loop, event in self._waiting:
                loop.call_soon_threadsafe(event.set)
