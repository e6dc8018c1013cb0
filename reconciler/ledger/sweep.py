"""Bounded reconciliation: probe due operations, record what the probes saw, decide again.

    intent ── attempt ──┬─ probe ─ probe ── probe ──────── probe ─┬─▶ verdict: done
                        │   backoff doubles between rounds         │
                        └──────────── reconcile_deadline_s ────────┴─▶ still indeterminate:
                                      or probe_budget rounds             escalate, never retry

A sweeper only reads the provider (through probes) and writes evidence; it never dispatches or
retries a side effect. A probe that raises, hangs past `probe_timeout_s` or returns something
that is not evidence is recorded as an `unavailable` observation: evidence of nothing. So is an
empty read by a probe that could not have seen the operation's effect (SPEC section 3: it does
not cover the action, or finds effects by something the request did not carry; `seen`), the
sweep's and an on-demand reconcile's alike: both conclude their rounds in `_turn`.

A pass keeps up to `concurrency` rounds in flight from one thread, the caller's. It hands each
probe call to a daemon thread (`ProbeThreads`), cuts off the calls that overrun, and in each
turn concludes every round whose probes have all answered (`store.rounds`) and claims due
operations for the slots they free, a few at a time, all in one transaction:

    turn: conclude the ready rounds, claim ──▶ probe calls out ──▶ answers and cut-offs in ──┐
      ▲──────────────────────────────────────────────────────────────────────────────────────┘
"""

from __future__ import annotations

import logging
import queue
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime

from apscheduler.schedulers.background import BackgroundScheduler

from probes.base import Probe, ProbeResult, ProbeTarget
from probes.runner import ProbeThreads, ref_returned, seen
from reconciler.core.domain import Authority, Intent, Observation, Receipt
from reconciler.core.ports import Leases, Round
from reconciler.core.schedule import SweepPolicy
from reconciler.infra import metrics, tracing
from reconciler.ledger import Judgement, Ledger

log = logging.getLogger(__name__)


ProbeLookup = Callable[[str], Sequence[Probe]]


@dataclass(eq=False, slots=True)
class _InFlight:
    """One operation's round in flight: the probes still to call, what the others saw."""

    intent: Intent
    target: ProbeTarget
    probes: deque[Probe]
    evidence: list[ProbeResult] = field(default_factory=list)
    #: The probe of each answer in `evidence`, in the same order.
    answered: list[Probe] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Call:
    rnd: _InFlight
    probe: Probe
    started: float


class _Calls:
    """The probe calls of one pass: each round's probes in turn, each on a daemon thread
    (`ProbeThreads`), each answered or cut off at `timeout_s`."""

    def __init__(self, threads: ProbeThreads, timeout_s: float,
                 clock: Callable[[], datetime]) -> None:
        self.threads, self.timeout_s, self.clock = threads, timeout_s, clock
        self._answered: queue.SimpleQueue[Future[ProbeResult]] = queue.SimpleQueue()
        self._out: dict[Future[ProbeResult], _Call] = {}
        # Every call has the same limit, so cut-offs come in the order the calls went out.
        self._cutoffs: deque[tuple[float, Future[ProbeResult]]] = deque()

    def start(self, rnd: _InFlight) -> bool:
        """Call the round's next probe; False when it has none left (the round is done)."""
        if not rnd.probes:
            return False
        probe = rnd.probes.popleft()
        started = time.monotonic()
        answer = self.threads.submit(probe, rnd.target, self.clock)
        self._out[answer] = _Call(rnd, probe, started)
        self._cutoffs.append((started + self.timeout_s, answer))
        answer.add_done_callback(self._answered.put)
        return True

    def done(self) -> list[_InFlight]:
        """Wait for an answer or a cut-off, then take every one there is: the rounds whose
        last probe has answered (each call's answer recorded in its round, the next probe of
        the others called)."""
        answers = []
        try:
            answers.append(self._answered.get(timeout=self._until_cutoff()))
            while True:
                answers.append(self._answered.get_nowait())
        except queue.Empty:
            pass
        ended: list[_InFlight] = []
        for answer in answers:
            call = self._out.pop(answer, None)
            if call is not None:  # else cut off already: the answer came too late
                self._record(call, answer.result(), ended)
        now = time.monotonic()
        while self._cutoffs and (self._cutoffs[0][0] <= now
                                 or self._cutoffs[0][1] not in self._out):
            cutoff = self._out.pop(self._cutoffs.popleft()[1], None)
            if cutoff is not None:  # abandoned to its thread
                self._record(cutoff, Observation(
                    cutoff.rnd.target.operation_id, self.clock(), cutoff.probe.name,
                    Authority.UNAVAILABLE, (), f"probe timed out after {self.timeout_s:g}s"),
                    ended)
        return ended

    def _until_cutoff(self) -> float | None:
        while self._cutoffs and self._cutoffs[0][1] not in self._out:
            self._cutoffs.popleft()
        return max(self._cutoffs[0][0] - time.monotonic(), 0.0) if self._cutoffs else None

    def _record(self, call: _Call, result: ProbeResult, ended: list[_InFlight]) -> None:
        name = call.probe.name
        metrics.PROBE_DURATION.labels(name).observe(time.monotonic() - call.started)
        metrics.PROBE_REQUESTS.labels(call.rnd.target.provider, name).inc()
        authority = result.authority.value if isinstance(result, Observation) else "receipt"
        metrics.PROBE_RESULTS.labels(name, authority).inc()
        tracing.probe_read(name, call.rnd.target.operation_id, result,
                           time.monotonic() - call.started)
        call.rnd.evidence.append(result)
        call.rnd.answered.append(call.probe)
        if not self.start(call.rnd):
            ended.append(call.rnd)


class Sweeper:
    """Probes due operations with bounded concurrency, under a lease per operation.

    Thread-safe: passes may run at once (each claims its own operations). The daemon threads
    of probe calls live from pass to pass; `close` ends them.
    """

    def __init__(self, ledger: Ledger, leases: Leases, probes_for: ProbeLookup,
                 policy: SweepPolicy | None = None, holder: str | None = None) -> None:
        self.ledger = ledger
        self.leases = leases
        self.probes_for = probes_for
        self.policy = policy or SweepPolicy()
        self.holder = holder or f"sweeper-{uuid.uuid4().hex[:12]}"
        self._threads = ProbeThreads()

    def sweep(self) -> list[Judgement]:
        """One pass: claim what is due (up to `policy.batch`), probe it all, decide, schedule or
        escalate. The judgements come in the order the rounds ended."""
        concurrency = self.policy.concurrency
        chunk = max(1, concurrency // 8)  # several leases per claim: fewer, fuller turns
        calls = self._calls()
        judgements: list[Judgement] = []
        unfinished: dict[str, _InFlight] = {}
        ready: list[_InFlight] = []
        left = self.policy.batch
        try:
            while True:
                room = min(concurrency - len(unfinished) + len(ready), left)
                claim = room if room > 0 and room >= min(chunk, left) else 0
                if ready or claim:
                    judged, intents = self._turn(ready, claim)
                    judgements += judged
                    for rnd in ready:
                        del unfinished[rnd.intent.operation_id]
                    # Fewer than asked: nothing else is due now.
                    left = left - claim if len(intents) == claim else 0
                    ready = []
                    for intent in intents:
                        unfinished[intent.operation_id] = rnd = self._round(intent)
                        if not calls.start(rnd):
                            ready.append(rnd)
                elif unfinished:
                    ready = calls.done()
                else:
                    return judgements
        except BaseException:
            self._abandon(list(unfinished))
            raise

    def reconcile(self, operation_id: str) -> Judgement | None:
        """Probe one operation now (on demand); None when another sweeper holds it."""
        if not self.leases.claim(operation_id, self.holder, self.ledger.clock(),
                                 self.policy.lease_s):
            return None
        try:
            rnd = self._round(self.ledger.store.facts(operation_id).intent)
            calls = self._calls()
            ready = [] if calls.start(rnd) else [rnd]
            while not ready:
                ready = calls.done()
            [judgement], _ = self._turn(ready, claim=0)
        except BaseException:
            self._abandon([operation_id])
            raise
        return judgement

    def close(self) -> None:
        """End the idle probe threads and give up every lease this sweeper holds."""
        self._threads.close()
        self.leases.release_all(self.holder)

    def _round(self, intent: Intent) -> _InFlight:
        return _InFlight(intent, ProbeTarget.of(intent), deque(self.probes_for(intent.provider)))

    def _calls(self) -> _Calls:
        return _Calls(self._threads, self.policy.probe_timeout_s, self.ledger.clock)

    def _turn(self, rounds: Sequence[_InFlight],
              claim: int) -> tuple[list[Judgement], list[Intent]]:
        """Conclude `rounds` (record, decide, schedule, release: each verdict decided once, on
        everything its round saw) and claim up to `claim` due operations, in one transaction."""
        judgements, intents, escalated = self.ledger.conclude(
            self.leases, self.holder, [Round(r.intent, self._seen(r)) for r in rounds],
            self.policy, claim=claim)
        metrics.ESCALATIONS.inc(escalated)
        return judgements, intents

    def _seen(self, rnd: _InFlight) -> list[ProbeResult]:
        """The round's evidence, each empty read held to what its probe could see (`seen`).
        Whether the provider returned a ref is asked of the store only for a probe that finds
        effects by one, and only once per round; a receipt of this round counts."""
        known: list[bool] = []

        def returned() -> bool:
            if not known:
                known.append(any(isinstance(a, Receipt) for a in rnd.evidence)
                             or ref_returned(self.ledger.store.facts(rnd.intent.operation_id)))
            return known[0]

        return [seen(probe, rnd.intent, answer, returned)
                for probe, answer in zip(rnd.answered, rnd.evidence, strict=True)]

    def _abandon(self, operation_ids: Sequence[str]) -> None:
        """Release the leases of rounds that cannot conclude (the store failed, most likely:
        then they lapse at expiry instead)."""
        if not operation_ids:
            return
        try:
            self.leases.abandon(operation_ids, self.holder, self.ledger.clock())
        except Exception as exc:
            log.warning("sweeper %s could not release %d leases (they lapse at expiry): %s",
                        self.holder, len(operation_ids), exc)


def sweep_periodically(sweeper: Sweeper, every_s: float) -> BackgroundScheduler:
    """Run `sweeper.sweep` every `every_s` seconds on APScheduler, starting now. One sweep at a
    time (a slow sweep delays the next, never overlaps it); call `.shutdown()` to stop."""
    scheduler = BackgroundScheduler(timezone="UTC")
    scheduler.add_job(sweeper.sweep, "interval", seconds=every_s, id="reconcile-sweep",
                      max_instances=1, coalesce=True,
                      next_run_time=datetime.now(UTC))
    scheduler.start()
    return scheduler
