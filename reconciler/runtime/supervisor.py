"""The supervisor: recovery without a human. Inside `reconciler serve` (with an agent), it looks
for runs no worker advances and advances them, the way `POST /v1/runs/{id}/resume` would for a
live run, so nobody has to call resume after a worker dies.

    every interval_s:  journal.needing_work(now, now - idle_s, batch)
                         │  queued and never started, or a live run whose lease lapsed
                         │  (its worker died) or that nobody has held for idle_s
                         ▼
                       journal.claim_unattended ── lost: another replica's supervisor has it
                         │ won (one conditional UPDATE)
                         ▼
                       AgentRuntime.advance(run_id): its heartbeat keeps the lease, its
                       recovery settles what the dead worker left (reconcile, never re-send blind)

The lease decides who advances a run: a run whose worker lives is never touched (its heartbeat
renews the lease every third of it), and of two supervisors that find the same orphan only the
one whose claim lands advances it. Runs waiting for a human (approval) or for their client (a
continue request) are not work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from reconciler.core.errors import RunConflictError
from reconciler.infra.metrics import SUPERVISED_RUNS, SUPERVISOR_TICKS
from reconciler.runtime.loop import AgentRuntime

log = logging.getLogger(__name__)

#: Defaults of `reconciler serve` (settings supervise_*): a dead worker's run is picked up
#: within lease + interval; a look costs two index range scans.
INTERVAL_S = 2.0
BATCH = 8
CONCURRENCY = 32


class Supervisor:
    """Looks every `interval_s` for up to `batch` runs needing work and advances them, at most
    `concurrency` at once, on `runtime` (so a cancel sent to this process reaches them). A run
    nobody holds counts as needing work once it has not moved for `idle_s` (default: the
    runtime's lease), which leaves a run a request has just created to that request."""

    def __init__(self, runtime: AgentRuntime, *, interval_s: float = INTERVAL_S,
                 batch: int = BATCH, concurrency: int = CONCURRENCY,
                 idle_s: float | None = None) -> None:
        if interval_s <= 0 or batch < 1 or concurrency < 1:
            raise ValueError("the supervisor needs interval_s > 0, batch >= 1, concurrency >= 1")
        self.runtime = runtime
        self.interval_s = interval_s
        self.batch = batch
        self.concurrency = concurrency
        self.idle_s = runtime.lease_s if idle_s is None else idle_s
        self._advancing: dict[str, asyncio.Task[None]] = {}
        self._looking: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @property
    def advancing(self) -> frozenset[str]:
        """The runs this supervisor is advancing now."""
        return frozenset(self._advancing)

    async def tick(self) -> list[str]:
        """One look: claim up to `batch` runs needing work (fewer when `concurrency` advances
        are running) and start advancing each; the ids of those it claimed."""
        room = min(self.batch, self.concurrency - len(self._advancing))
        if room <= 0:
            return []
        runtime = self.runtime
        claimed = []
        # On the event loop, like the runtime's own store calls, but never while a probe
        # thread holds the store (a store may have a single connection).
        async with runtime.toolgate.off_loop:
            now = runtime.ledger.clock()
            idle_before = now - timedelta(seconds=self.idle_s)
            for run_id in runtime.journal.needing_work(now, idle_before, room):
                if run_id in self._advancing:
                    continue
                if runtime.journal.claim_unattended(run_id, runtime.holder, now,
                                                    runtime.lease_s, idle_before):
                    claimed.append(run_id)
        for run_id in claimed:
            self._advancing[run_id] = asyncio.create_task(self._advance(run_id),
                                                          name=f"supervise {run_id}")
        SUPERVISOR_TICKS.inc()
        return claimed

    async def _advance(self, run_id: str) -> None:
        try:
            # The lease is ours already (claim_unattended): advance renews it as its holder.
            advance = await self.runtime.advance(run_id)
            SUPERVISED_RUNS.labels(advance.view.state.value).inc()
            log.info("supervisor advanced run %s to %s", run_id, advance.view.state.value)
        except RunConflictError as exc:
            # Taken over (forced) by someone else meanwhile: theirs to finish.
            SUPERVISED_RUNS.labels("conflict").inc()
            log.info("supervisor left run %s: %s", run_id, exc)
        except asyncio.CancelledError:
            raise  # shutdown: advance released the lease, another replica picks the run up
        except Exception:  # a supervisor outlives any one run's failure (the store away...)
            SUPERVISED_RUNS.labels("error").inc()
            log.exception("supervisor could not advance run %s", run_id)
        finally:
            self._advancing.pop(run_id, None)

    def start(self) -> None:
        """Look every `interval_s` (the first look after one interval) until `stop`."""
        if self._looking is None:
            self._stop.clear()
            self._looking = asyncio.create_task(self._look(), name="supervisor")

    async def _look(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval_s)
                return
            try:
                await self.tick()
            except Exception:  # the store away: look again next time
                log.exception("supervisor: looking for runs needing work failed")

    async def stop(self, grace_s: float) -> None:
        """Stop looking; give the runs being advanced `grace_s` to come to rest, then cancel
        them (each gives up its lease, so another replica takes it over once idle)."""
        self._stop.set()
        if self._looking is not None:
            await self._looking
            self._looking = None
        running = list(self._advancing.values())
        if not running:
            return
        _, pending = await asyncio.wait(running, timeout=grace_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
