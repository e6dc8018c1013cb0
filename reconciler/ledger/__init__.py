"""The ledger: the one door to the verdict engine.

Every fact is recorded and every verdict decided here: the service's routes, the retry gate,
the sweep's probe rounds, the agent runtime and fixture replay all go through a `Ledger`, so
they all apply the same rules the same way. It is the only caller of the verdict engine
(`verdicts.decide` and `evaluate`) and of `schedule`; the store caches what they decide, in the
transaction that read the facts they were decided from. The rules read the summary of an
operation's facts (reconciler.core.summary), which the in-memory store keeps folded as it records
and the SQL store folds from the rows it read.

    record_* ─▶ Store ──┐
    judge ─────▶ Store.decide(decide, then due_after) ────────────▶ Judgement
    record_attempt ─▶ Store.record_attempt_and_decide (one transaction) ─▶ Judgement
      (an opening under a retry grant: Leases.record_granted_attempt, the same with the check)
    judge_retry ────▶ Leases.grant_retry (decision + retry lease, one transaction)
    conclude ──▶ Leases.close_rounds(decide, then next_round) ──▶ Judgements, claimed intents
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from reconciler.core.domain import (
    Attempt,
    Decision,
    Evidence,
    Facts,
    Intent,
    Observation,
    ProviderContract,
    Receipt,
    Resolution,
    Snapshot,
)
from reconciler.core.errors import FactTimeError, UnknownOperationError
from reconciler.core.ports import (
    FIRST_DECISION,
    Decided,
    Delivery,
    Grantable,
    Leases,
    Round,
    Scheduled,
    Store,
)
from reconciler.core.retention import SETTLED, removable
from reconciler.core.schedule import SweepPolicy, due_after, due_on_dispatch, next_round
from reconciler.core.summary import Summary
from reconciler.core.verdicts import decide, evaluate

#: How far ahead of the ledger's clock a caller's evidence may be dated: jitter.
MAX_CLOCK_SKEW = timedelta(seconds=1)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Delivered(StrEnum):
    """What became of a provider's callback."""

    #: Its id was accepted before: nothing recorded (the route answers 401).
    REPLAY = "replay"
    #: Accepted, and its receipt recorded.
    RECORDED = "recorded"
    #: Accepted, but it names none of the provider's operations: no evidence.
    IGNORED = "ignored"


@dataclass(frozen=True, slots=True)
class Judgement:
    """An operation's facts and the decision drawn from them at one time."""

    snapshot: Snapshot
    decision: Decision
    at: datetime
    #: Handed to a human by a sweeper (deadline or probe budget spent); never probed again.
    escalated: bool
    #: The operation's cached verdict changed with this judgement (a transition, not a read):
    #: how it came about, not what it says, so two judgements of the same facts compare equal.
    changed: bool = field(default=False, compare=False)

    @property
    def facts(self) -> Facts:
        """The facts it was drawn from (read from the store the first time they are asked for)."""
        return self.snapshot.facts


@dataclass(frozen=True, slots=True)
class Recorded:
    """A recording call's answer: was the fact new, and where the operation now stands."""

    created: bool
    judgement: Judgement


#: Told of every verdict transition: an operation's cached verdict entered a new value.
TransitionObserver = Callable[[Judgement], None]


class Ledger:
    """Records facts about operations and decides their verdicts. `on_transition` hears of
    each verdict that changes (a new intent's first verdict included), whoever caused it:
    the service counts them (reconciler_verdicts_total) without the store knowing of metrics."""

    def __init__(self, store: Store, clock: Callable[[], datetime] = utcnow,
                 on_transition: TransitionObserver | None = None) -> None:
        self.store = store
        self.clock = clock
        self.on_transition = on_transition

    def _told(self, judgement: Judgement) -> Judgement:
        if judgement.changed and self.on_transition is not None:
            self.on_transition(judgement)
        return judgement

    def time_of(self, given: datetime | None, *, ahead_ok: bool = False) -> datetime:
        """The time of a fact a caller reports: its own when given (in UTC), else the
        ledger's. FactTimeError when it cannot be used: out of range, or (unless `ahead_ok`)
        ahead of the ledger's clock. An attempt's time may be ahead (`ahead_ok`): the attempt
        is also stamped with the ledger's time when recorded, and the rules use the stricter
        of the two (domain.Attempt), so a fast worker clock is kept, not refused after the
        real send. Evidence dated in the future could pass for the latest observation: kept
        to jitter."""
        now = self.clock()
        if given is None:
            return now
        try:
            in_utc = given.astimezone(UTC)
        except OverflowError:  # 0001-01-01T00:00:00+01:00: valid RFC 3339, before year 1 in UTC
            raise FactTimeError("out_of_range", "'at' is outside years 1 to 9999 once in UTC; "
                                "send it in UTC") from None
        if not ahead_ok and in_utc > now + MAX_CLOCK_SKEW:
            raise FactTimeError("future", "'at' is in the future by the server's clock; omit "
                                "it to use the server's time")
        return in_utc

    def record_intent(self, intent: Intent) -> Recorded:
        """Record an intent (an identical repeat is accepted, not new); IntentConflictError
        when the id exists with another hash or key."""
        created = self.store.record_intent(intent)
        if created:
            # Only the intent is known, and the store cached its first decision with it: when
            # the engine agrees, reading it all back (half the cost of this call) tells nothing.
            at = self.clock()
            facts = Facts(intent)
            decision = evaluate(facts, self.store.contract(intent.provider), at)
            if (decision.verdict, decision.next_action) == FIRST_DECISION:
                return Recorded(True, self._told(Judgement(Snapshot.of(facts), decision, at,
                                                           escalated=False, changed=True)))
            # The store cached the first decision with the intent: that is a transition too.
            verdict, action = FIRST_DECISION
            self._told(Judgement(Snapshot.of(facts), Decision(verdict, (), action, False), at,
                                 escalated=False, changed=True))
        return Recorded(created, self.judge(intent.operation_id))

    def record_attempt(self, attempt: Attempt, *, stamped: bool = False,
                       granted_by: Leases | None = None, holder: str | None = None,
                       grant: str | None = None) -> Recorded:
        """Record a report of an attempt: every report is kept (SPEC section 4: a late answer
        after a timeout, two reports racing, another key or hash), and only an identical repeat
        of a report kept is not new; the completion of an attempt opened as dispatching fills
        that record. `stamped`: the caller named no dispatch time, so the report's time is the
        ledger's time of recording (`at == recorded_at`, which tells the store so): a further
        report of a recorded attempt then takes that attempt's dispatch time
        (store/reports.py), and a resend that differs only in its time is an identical repeat.
        With `granted_by`, a new attempt needs the retry grant for its number held by `holder`
        (and `grant`, its token's hash, when given: `Leases.record_granted_attempt`:
        RetryNotGrantedError otherwise)."""
        at = self.clock()
        attempt = replace(attempt, recorded_at=at, at=at if stamped else attempt.at)
        due_at = due_on_dispatch(attempt)
        # The attempt and the decision it leads to (and the grant's check), in one transaction.
        created, decided = (
            self.store.record_attempt_and_decide(attempt, _decided, at, due_at=due_at)
            if granted_by is None else
            granted_by.record_granted_attempt(attempt, holder, _decided, at, due_at=due_at,
                                              grant=grant))
        return Recorded(created, self._judged(decided, at))

    def record_evidence(self, evidence: Evidence) -> Judgement:
        evidence = self._stamped(evidence)
        self.store.record_evidence(evidence)
        return self.judge(evidence.operation_id)

    def _stamped(self, evidence: Evidence) -> Evidence:
        """Provider evidence carries the ledger's time of recording beside its claimed one; a
        human resolution, how many attempt reports the human could have known of (an attempt
        reported after it reopens the decision, however it is dated: SPEC section 4)."""
        if isinstance(evidence, Receipt | Observation) and evidence.recorded_at is None:
            return replace(evidence, recorded_at=self.clock())
        if isinstance(evidence, Resolution) and evidence.attempts_known is None:
            # Read only here: resolutions are a person's, rare, and off the hot path.
            known = len(self.store.facts(evidence.operation_id).attempts)
            return replace(evidence, attempts_known=known)
        return evidence

    def _owned_by(self, provider: str, operation_id: str) -> bool:
        """A provider vouches only for its own operations."""
        try:
            return self.store.facts(operation_id).intent.provider == provider
        except UnknownOperationError:
            return False

    def record_delivery(self, provider: str, delivery: Delivery,
                        receipt: Receipt | None) -> Delivered:
        """A provider's signed callback (webhook), accepted once: a replay records nothing.
        Its receipt is recorded with it only when it is about one of that provider's own
        operations; another's, or an unknown one's, is no evidence (the delivery is still
        accepted, so that the provider stops sending it)."""
        if receipt is not None and not self._owned_by(provider, receipt.operation_id):
            receipt = None
        if receipt is not None and receipt.recorded_at is None:
            receipt = replace(receipt, recorded_at=self.clock())
        if not self.store.record_delivery(delivery, receipt):
            return Delivered.REPLAY
        if receipt is None:
            return Delivered.IGNORED
        self.judge(receipt.operation_id)
        return Delivered.RECORDED

    def judge(self, operation_id: str, now: datetime | None = None) -> Judgement:
        """Decide the verdict from everything recorded, and cache it in the store."""
        at = now or self.clock()
        return self._judged(self.store.decide(operation_id, _decided, at), at)

    def judge_retry(self, leases: Leases, operation_id: str, holder: str,
                    grantable: Grantable, now: datetime, ttl_s: float,
                    grant: str | None = None) -> tuple[Judgement, datetime | None]:
        """Judge the operation and, when `grantable` gives an attempt number for that
        judgement, grant `holder` the retry lease for it (unless another caller holds it), in
        one transaction. The judgement, and the lease's expiry (None: not granted)."""
        decided, expires = leases.grant_retry(operation_id, holder, _decided, grantable, now,
                                              ttl_s, grant)
        return self._judged(decided, now), expires

    def _judged(self, decided: Decided, at: datetime) -> Judgement:
        return self._told(Judgement(decided.snapshot, decided.decision, at, decided.escalated,
                                    decided.changed))

    def preview(self, operation_id: str, evidence: Evidence) -> Decision:
        """The decision `evidence` would give if it were recorded now; nothing is recorded
        (the console's "what happens next" before a person confirms a decision)."""
        facts = self.store.facts(operation_id)
        with_it = replace(facts, evidence=(*facts.evidence, evidence))
        return evaluate(with_it, self.store.contract(facts.intent.provider), self.clock())

    def remove_settled(self, before: datetime, *, after: str | None = None, limit: int = 500,
                       removing: Callable[[Judgement], None] | None = None
                       ) -> tuple[list[Judgement], str | None]:
        """Remove a batch of settled operations decided before `before` that retention allows
        (retention.removable), deciding each afresh in the removing transaction: one whose
        facts no longer give a settled verdict stays. `removing` hears of each before the
        transaction commits (an export: if it raises, nothing is removed). What was removed,
        as judged when it was, and the cursor to go on from (None: done)."""
        now = self.clock()
        decided: dict[str, Decision] = {}

        def gone(facts: Facts, contract: ProviderContract, at: datetime) -> bool:
            decision = evaluate(facts, contract, at)
            decided[facts.intent.operation_id] = decision
            remove = decision.verdict.value in SETTLED and removable(facts, contract, at)
            if remove and removing is not None:
                removing(Judgement(Snapshot.of(facts), decision, at, escalated=False))
            return remove

        removed, cursor = self.store.remove_settled(before, now, gone, after=after,
                                                    limit=limit)
        return [Judgement(Snapshot.of(f), decided[f.intent.operation_id], now, escalated=False)
                for f in removed], cursor

    def conclude(self, leases: Leases, holder: str, rounds: Sequence[Round],
                 policy: SweepPolicy, *, claim: int = 0
                 ) -> tuple[list[Judgement], list[Intent], int]:
        """Conclude `holder`'s probe `rounds` (record their evidence, decide, schedule the next
        round or escalate, release the lease) and claim up to `claim` due operations for
        `policy.lease_s`, in one transaction. The judgements in round order, the claimed
        intents, and how many operations this call escalated."""
        now = self.clock()
        paused = {r.intent.operation_id: until for r in rounds
                  if (until := rate_limited_until(r)) is not None}

        def rule(summary: Summary, contract: ProviderContract, number: int) -> Scheduled:
            decision = decide(summary, contract, now)
            return next_round(summary, decision, contract, number, now, policy,
                              quiet_until=paused.get(summary.intent.operation_id))

        ended, intents = leases.close_rounds(holder, rounds, rule, now, claim=claim,
                                             lease_s=policy.lease_s)
        judgements = [self._told(Judgement(c.snapshot, c.decision, now,
                                           c.was_escalated or c.escalate, c.changed))
                      for c in ended]
        return judgements, intents, sum(c.escalate and not c.was_escalated for c in ended)


def _decided(summary: Summary, contract: ProviderContract, now: datetime) -> Scheduled:
    """The verdict on recorded facts, and when the next probe round is due if it changed."""
    decision = decide(summary, contract, now)
    return Scheduled(decision, due_after(summary, decision, contract))


def rate_limited_until(rnd: Round) -> datetime | None:
    """When a round whose every read the provider's rate limit cut may read again (the latest
    pause its reads were asked for); None when some read was made, or none was tried."""
    pauses = [e.retry_at for e in rnd.evidence if isinstance(e, Observation)]
    if not pauses or len(pauses) < len(rnd.evidence) or None in pauses:
        return None
    return max(p for p in pauses if p is not None)
