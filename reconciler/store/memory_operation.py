"""`MemoryOperation`: an operation as `MemoryStore` (store/memory.py) holds it.

Its facts, and its state: what the SQL store keeps in an operation's state row (the cached
decision, the probe schedule, both leases), with the few rules that read and write that state.

Each operation keeps the summary of its facts (reconciler.core.summary) folded as they are recorded,
so that deciding after a new fact costs the same whatever the operation's history (replay
decides after every line). Only a retry of a non_idempotent action out of order refolds the
history: what was known before a retry is the evidence dated before it, wherever it was
recorded (reconciler.core.summary).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from reconciler.core.attention import reason_of
from reconciler.core.domain import (
    Attempt,
    Decision,
    Evidence,
    Facts,
    Intent,
    Observation,
    Snapshot,
    Verdict,
)
from reconciler.core.ports import ERROR_CHARS, OperationSummary
from reconciler.core.summary import Summary, summarize
from reconciler.store import reports


@dataclass(slots=True)
class OperationState:
    """An operation's cached decision, schedule and leases (the SQL store's state row)."""

    verdict: str
    next_action: str
    updated_at: datetime
    probe_count: int = 0
    due_at: datetime | None = None
    escalated: bool = False
    lease_holder: str | None = None
    lease_expires_at: datetime | None = None
    retry_holder: str | None = None
    retry_lease_expires_at: datetime | None = None
    retry_attempt: int | None = None
    retry_grant: str | None = None


@dataclass(slots=True)
class MemoryOperation:
    """An operation's intent, every report and evidence recorded for it, their summary and its
    state."""

    intent: Intent
    state: OperationState
    summary: Summary
    #: Every report of every attempt, in recorded order (a completion fills its opening's).
    reports: list[Attempt] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    #: Where the reports of each attempt number are in `reports` (its keys: the numbers
    #: recorded).
    numbered: dict[int, list[int]] = field(default_factory=dict)
    #: Each completion as (index in `reports`, the open report it replaced), in order: a
    #: snapshot taken before it puts the open report back when it is read.
    completions: list[tuple[int, Attempt]] = field(default_factory=list)

    def facts(self) -> Facts:
        return Facts(self.intent, tuple(self.reports), tuple(self.evidence))

    def snapshot(self) -> Snapshot:
        """The facts as they stand, copied only when read: the reports and evidence are only
        ever appended to but for completions, which are logged, so what they hold now is their
        first entries with the completions since undone."""
        intent, reports, completions, evidence = (self.intent, self.reports, self.completions,
                                                  self.evidence)
        counts = len(reports), len(completions), len(evidence)

        def read() -> Facts:
            kept = reports[:counts[0]]
            for index, open_ in reversed(completions[counts[1]:]):
                if index < counts[0]:
                    kept[index] = open_
            return Facts(intent, tuple(kept), tuple(evidence[:counts[2]]))

        return Snapshot(read)

    def add_evidence(self, evidence: Evidence) -> None:
        kept = _kept(evidence)
        self.evidence.append(kept)
        self.summary.add_evidence(kept)

    def put_attempt(self, attempt: Attempt) -> bool:
        """Keep a report of `attempt` (store/reports.py) and fold it into the summary; False
        for an identical repeat. Only a retry out of order refolds the whole history."""
        where = self.numbered.setdefault(attempt.number, [])
        kept = [self.reports[i] for i in where]
        attempt = reports.as_reported(kept, attempt)
        if reports.repeats(kept, attempt):
            return False
        index = reports.opened(kept, attempt)
        if index is not None:
            open_, done = kept[index], reports.completion(kept[index], attempt)
            self.reports[where[index]] = done
            self.completions.append((where[index], open_))
            self.summary.complete(open_, done)
            return True
        where.append(len(self.reports))
        self.reports.append(attempt)
        if not self.summary.add_attempt(attempt):
            self.summary = summarize(self.facts())
        return True


def is_free(expires: datetime | None, now: datetime) -> bool:
    """No lease, or one that lapsed before `now`."""
    return expires is None or expires < now


def due_from(state: OperationState, at: datetime) -> None:
    """A dispatch makes an undecided, unescalated operation due from `at`, unless due earlier."""
    if (not state.escalated and state.verdict == Verdict.INDETERMINATE.value
            and (state.due_at is None or state.due_at > at)):
        state.due_at = at


def is_due(state: OperationState, now: datetime) -> bool:
    """Scheduled for a probe at or before `now`."""
    return state.due_at is not None and state.due_at <= now


def cache_decision(state: OperationState, decision: Decision, now: datetime) -> bool:
    """Only a change is written (`updated_at` says when the verdict last changed); whether
    there was one."""
    verdict, action = decision.verdict.value, decision.next_action
    if (state.verdict, state.next_action) == (verdict, action):
        return False
    state.verdict, state.next_action, state.updated_at = verdict, action, now
    return True


def summary_of(op_id: str, op: MemoryOperation) -> OperationSummary:
    """The operation as a list shows it, with why it waits for a human, if it does."""
    state = op.state
    reason = reason_of(state.verdict, state.next_action, state.escalated)
    return OperationSummary(op_id, op.intent.provider, op.intent.action, state.verdict,
                            state.next_action, state.escalated, state.updated_at,
                            reason.value if reason else None)


def _kept(evidence: Evidence) -> Evidence:
    if isinstance(evidence, Observation) and evidence.error:
        return replace(evidence, error=evidence.error[:ERROR_CHARS])
    return evidence
