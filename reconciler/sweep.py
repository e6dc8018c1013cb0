"""Bounded reconciliation: probe due operations, record what the probes saw, decide again.

    intent ── attempt ──┬─ probe ─ probe ── probe ──────── probe ─┬─▶ verdict: done
                        │   backoff doubles between rounds         │
                        └──────────── reconcile_deadline_s ────────┴─▶ still indeterminate:
                                      or probe_budget rounds             escalate, never retry

A sweeper only reads the provider (through probes) and writes evidence; it never dispatches or
retries a side effect. A probe that raises, hangs past `probe_timeout_s` or returns something
that is not evidence is recorded as an `unavailable` observation: evidence of nothing.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.background import BackgroundScheduler

from probes.base import Probe, ProbeTarget
from probes.runner import run_probe as checked_probe
from reconciler import metrics
from reconciler.domain import Authority, Facts, Observation, Receipt, Verdict
from reconciler.ledger import Judgement, Ledger
from reconciler.store.leases import SqlLeases


@dataclass(frozen=True, slots=True)
class SweepPolicy:
    """How hard and how long to look before a human is asked."""

    concurrency: int = 4
    probe_timeout_s: float = 10.0
    probe_budget: int = 20
    first_backoff_s: float = 1.0
    max_backoff_s: float = 300.0
    lease_s: float = 60.0
    batch: int = 100


ProbeLookup = Callable[[str], Sequence[Probe]]


def run_probe(probe: Probe, target: ProbeTarget, timeout_s: float,
              now: Callable[[], datetime]) -> Observation | Receipt:
    """One probe call held to the probe contract (`probes.runner`), cut off at `timeout_s`.

    The call runs on a daemon thread: a probe that ignores its own timeouts is abandoned there,
    and never holds up the sweep or the process exit.
    """
    box: list[Observation | Receipt] = []
    started = time.perf_counter()
    worker = threading.Thread(target=lambda: box.append(checked_probe(probe, target, now)),
                              daemon=True)
    worker.start()
    worker.join(timeout_s)
    metrics.PROBE_DURATION.labels(probe.name).observe(time.perf_counter() - started)
    result = box[0] if box else Observation(
        target.operation_id, now(), probe.name, Authority.UNAVAILABLE, (),
        f"probe timed out after {timeout_s:g}s")
    authority = result.authority.value if isinstance(result, Observation) else "receipt"
    metrics.PROBE_RESULTS.labels(probe.name, authority).inc()
    return result


class Sweeper:
    """Probes due operations with bounded concurrency, under a lease per operation."""

    def __init__(self, ledger: Ledger, leases: SqlLeases, probes_for: ProbeLookup,
                 policy: SweepPolicy | None = None, holder: str | None = None) -> None:
        self.ledger = ledger
        self.leases = leases
        self.probes_for = probes_for
        self.policy = policy or SweepPolicy()
        self.holder = holder or f"sweeper-{uuid.uuid4().hex[:12]}"

    def sweep(self) -> list[Judgement]:
        """One pass: claim what is due, probe it all, decide, schedule or escalate."""
        now = self.ledger.clock()
        claimed = self.leases.claim_due(self.holder, now, self.policy.lease_s, self.policy.batch)
        if not claimed:
            return []
        with ThreadPoolExecutor(max_workers=self.policy.concurrency,
                                thread_name_prefix="reconcile") as pool:
            return list(pool.map(self._round, claimed))

    def reconcile(self, operation_id: str) -> Judgement | None:
        """Probe one operation now (on demand); None when another sweeper holds it."""
        if not self.leases.claim(operation_id, self.holder, self.ledger.clock(),
                                 self.policy.lease_s):
            return None
        return self._round(operation_id)

    def close(self) -> None:
        """Give up every lease this sweeper holds."""
        self.leases.release_all(self.holder)

    def _round(self, operation_id: str) -> Judgement:
        try:
            facts = self.ledger.store.facts(operation_id)
            target = ProbeTarget.of(facts.intent)
            for probe in self.probes_for(facts.intent.provider):
                # Recorded straight into the store: the verdict is decided once, after the round.
                self.ledger.store.record_evidence(run_probe(
                    probe, target, self.policy.probe_timeout_s, self.ledger.clock))
            judgement = self.ledger.judge(operation_id)
        except BaseException:
            self.leases.finish(operation_id, self.holder, next_probe_at=None, escalate=False)
            raise
        next_at, escalate = self._schedule(judgement)
        if escalate and not judgement.escalated:
            metrics.ESCALATIONS.inc()
        self.leases.finish(operation_id, self.holder, next_probe_at=next_at, escalate=escalate)
        return replace(judgement, escalated=judgement.escalated or escalate)

    def _schedule(self, judgement: Judgement) -> tuple[datetime | None, bool]:
        """(next probe time, escalate?) after a round."""
        if judgement.decision.verdict is not Verdict.INDETERMINATE:
            return None, False
        facts, now = judgement.facts, judgement.at
        rounds = self.leases.probe_count(facts.intent.operation_id) + 1
        contract = self.ledger.store.contract(facts.intent.provider)
        deadline = facts.intent.at + timedelta(seconds=contract.reconcile_deadline_s)
        if now >= deadline or rounds >= self.policy.probe_budget:
            return None, True
        next_at = now + timedelta(seconds=self._backoff(rounds, facts, contract.visibility_lag_s))
        return min(next_at, deadline), False

    def _backoff(self, rounds: int, facts: Facts, lag_s: float) -> float:
        """Doubling delays; never later than the end of the visibility window if that is
        still ahead, since that is when a lagging zero first means something."""
        delay = min(self.policy.first_backoff_s * 2.0 ** (rounds - 1), self.policy.max_backoff_s)
        dispatched = max((a.at for a in facts.attempts), default=facts.intent.at)
        window_ends = (dispatched + timedelta(seconds=lag_s) - self.ledger.clock()).total_seconds()
        return min(delay, window_ends) if window_ends > 0 else delay


def sweep_periodically(sweeper: Sweeper, every_s: float) -> BackgroundScheduler:
    """Run `sweeper.sweep` every `every_s` seconds on APScheduler, starting now. One sweep at a
    time (a slow sweep delays the next, never overlaps it); call `.shutdown()` to stop."""
    scheduler = BackgroundScheduler(timezone="UTC")
    scheduler.add_job(sweeper.sweep, "interval", seconds=every_s, id="reconcile-sweep",
                      max_instances=1, coalesce=True,
                      next_run_time=datetime.now(UTC))
    scheduler.start()
    return scheduler
