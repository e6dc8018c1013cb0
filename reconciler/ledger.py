"""The ledger: the store and the verdict engine together. Everything that records a fact or asks
for a verdict (replay, the reconciler, the HTTP service) goes through here, so they all agree."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from reconciler.domain import Attempt, Decision, Evidence, Facts, Intent
from reconciler.store import FIRST_DECISION, Store
from reconciler.verdicts import evaluate


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Judgement:
    """An operation's facts and the decision drawn from them at one time."""

    facts: Facts
    decision: Decision
    at: datetime
    #: Handed to a human by a sweeper (deadline or probe budget spent); never probed again.
    escalated: bool


@dataclass(frozen=True, slots=True)
class Recorded:
    """A recording call's answer: was the fact new, and where the operation now stands."""

    created: bool
    judgement: Judgement


class Ledger:
    """Records facts about operations and decides their verdicts."""

    def __init__(self, store: Store, clock: Callable[[], datetime] = utcnow) -> None:
        self.store = store
        self.clock = clock

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
                return Recorded(True, Judgement(facts, decision, at, escalated=False))
        return Recorded(created, self.judge(intent.operation_id))

    def record_attempt(self, attempt: Attempt) -> Recorded:
        """Record an attempt (an identical repeat is accepted, not new); AttemptConflictError
        when the number exists with other facts."""
        created = self.store.record_attempt(attempt)
        return Recorded(created, self.judge(attempt.operation_id))

    def record_evidence(self, evidence: Evidence) -> Judgement:
        self.store.record_evidence(evidence)
        return self.judge(evidence.operation_id)

    def judge(self, operation_id: str, now: datetime | None = None) -> Judgement:
        """Decide the verdict from everything recorded, and cache it in the store."""
        at = now or self.clock()
        facts, decision, escalated = self.store.decide(operation_id, evaluate, at)
        return Judgement(facts, decision, at, escalated)
