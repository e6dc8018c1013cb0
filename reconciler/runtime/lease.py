"""The heartbeat of a worker advancing a run: its lease on the run renewed while it works, and
a cancel another worker asked for (through the run's events) noticed, to stop the call in flight.

    claim ─ lease_s/3 ─ renew ─ lease_s/3 ─ renew ─┤ killed   ├ lease_s ┤ others may claim
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from reconciler.core.ports import Journal
from reconciler.core.runs.events import EventKind
from reconciler.runtime.cancel import CancelSignal

#: How often a worker looks for a cancel asked for elsewhere while it advances a run.
CANCEL_POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One worker's heartbeat (`AgentRuntime.advance` runs it beside each drive)."""

    journal: Journal
    holder: str
    lease_s: float
    clock: Callable[[], datetime]
    #: Held while a beat uses the store (the tool gate's `off_loop`: a probe on a thread may
    #: hold the store's one connection).
    off_loop: asyncio.Lock

    async def run(self, run_id: str, signal: CancelSignal, seen: int) -> None:
        """While this worker advances the run: renew its lease every third of `lease_s`, so
        the lease can be short (a worker that dies stops renewing, and another may take the run
        over once `lease_s` has passed), and every CANCEL_POLL_S look for a cancel another
        worker asked for, to stop the call in flight here."""
        renewed_at = time.monotonic()
        while True:
            await asyncio.sleep(min(CANCEL_POLL_S, self.lease_s / 3))
            async with self.off_loop:
                stopped = self.beat(run_id, signal, seen, renewed_at)
            if stopped is None:
                return
            seen, renewed_at = stopped

    def beat(self, run_id: str, signal: CancelSignal, seen: int,
             renewed_at: float) -> tuple[int, float] | None:
        """One heartbeat: fire `signal` on a cancel request after `seen`, renew the lease when
        due; None once the heartbeat should stop (lease taken over, store away)."""
        try:
            for event in self.journal.events(run_id, seen):
                seen = event.seq
                if event.kind is EventKind.CANCEL_REQUESTED:
                    signal.cancel(str(event.data["reason"]))
            if time.monotonic() - renewed_at >= self.lease_s / 3:
                renewed_at = time.monotonic()
                if not self.journal.claim(run_id, self.holder, self.clock(), self.lease_s):
                    return None  # taken over (forced): the journal's appends keep the two apart
        except Exception:  # the store is away: the drive's own next write will say so
            return None
        return seen, renewed_at
