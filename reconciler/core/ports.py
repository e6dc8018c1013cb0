"""The seams between the reconciler's logic and where its facts are kept.

The ledger, the retry gate, the sweep, the agent runtime and the service depend on these
protocols, never on a database. Three implementations hold to them, checked by one contract
suite (tests/test_store_contract.py): `store.sql` on SQLite and on PostgreSQL, and
`store.memory`, the in-memory twin that replay and unit tests use.

    service ─┐
    runtime ─┼─▶ gate, sweep ─▶ ledger ─▶ Store, Leases ◀── store.sql / store.memory
    replay  ─┘                    │
                                  └──▶ verdicts (pure: facts in, decision out)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from reconciler.core.domain import (
    Attempt,
    Decision,
    Evidence,
    Facts,
    Intent,
    ProviderContract,
    Snapshot,
    Verdict,
)
from reconciler.core.grants import Lease
from reconciler.core.runs.events import EventKind, RunEvent, RunView
from reconciler.core.summary import Summary
from reconciler.core.verdicts import NextAction

#: What the store caches for an operation when it records the intent: nothing is known yet.
FIRST_DECISION = (Verdict.INDETERMINATE, NextAction.RECONCILE)

#: How much of an observation's error text a store keeps (it explains; it proves nothing).
ERROR_CHARS = 500

@dataclass(frozen=True, slots=True)
class Scheduled:
    """A decision and what it means for the probe schedule: when the next round is due (None:
    none is) and whether the operation goes to a human."""

    decision: Decision
    due_at: datetime | None
    escalate: bool = False
    #: The round counts against the probe budget (`SweepPolicy.probe_budget`). A round the
    #: provider's rate limit cut made no read: it is not spent.
    spent: bool = True


#: A pure decision on a recorded fact: the summary of the operation's facts, its contract and the
#: time in (the ledger hands the store `verdicts.decide` and `schedule.due_after` through it; the
#: store applies it inside its own transaction, to a summary it keeps folded as it records or
#: to `summary.summarize` of the facts it read). The store keeps the schedule it gives only when
#: the verdict changes.
Rule = Callable[[Summary, ProviderContract, datetime], Scheduled]


#: The attempt number a retry grant would allow, given the operation's facts and the decision
#: drawn from them; None when no grant may be given (the gate's check, run in the store's
#: transaction: it must not touch the store).
Grantable = Callable[[Facts, Decision], int | None]


#: Whether a settled operation may be removed (retention.removable); runs in the store's
#: transaction and must not touch the store.
Removable = Callable[[Facts, ProviderContract, datetime], bool]

#: The outcome of a probe round from the summary of its operation's facts (this round's evidence
#: included), its contract and the round's number (1 for the first). It runs inside the store's
#: transaction: it must not touch the store.
RoundRule = Callable[[Summary, ProviderContract, int], Scheduled]


@dataclass(frozen=True, slots=True)
class Round:
    """What one probe round saw about one operation."""

    intent: Intent
    evidence: Sequence[Evidence]


@dataclass(frozen=True, slots=True)
class Conclusion:
    """What a round decided and scheduled."""

    snapshot: Snapshot
    decision: Decision
    #: Escalated to a human by an earlier round.
    was_escalated: bool
    #: Escalated by this round (deadline or probe budget spent).
    escalate: bool
    #: The cached verdict changed with this round (a transition, not a re-read).
    changed: bool = False

    @property
    def facts(self) -> Facts:
        """The facts the round decided on, its own evidence included."""
        return self.snapshot.facts


@dataclass(frozen=True, slots=True)
class Delivery:
    """One signed provider callback (webhook) as its provider identifies it. `scheme` names
    whose ids these are; `keep_for`: how long the id must be kept to refuse its replay, None
    for schemes without a signed timestamp, whose ids are kept for good."""

    scheme: str
    delivery_id: str
    received_at: datetime
    keep_for: timedelta | None


@dataclass(frozen=True, slots=True)
class OperationSummary:
    """One line of the operations list."""

    operation_id: str
    provider: str
    action: str
    verdict: str
    next_action: str
    escalated: bool
    updated_at: datetime
    #: Why a human must look at it (attention.Reason), None when nothing waits on one.
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Decided:
    """What `Store.decide` cached: the facts, the decision drawn from them, whether a sweeper
    has escalated the operation, and whether the cached verdict changed (a transition)."""

    snapshot: Snapshot
    decision: Decision
    escalated: bool
    changed: bool

    @property
    def facts(self) -> Facts:
        return self.snapshot.facts


@dataclass(frozen=True, slots=True)
class Waiting:
    """How many operations wait on a human for one reason, and since when the oldest has."""

    reason: str
    count: int
    oldest: datetime


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One line of the runs list (the journal's summary row, no event payloads)."""

    run_id: str
    state: str
    turn: int
    correlation_id: str | None
    stop_reason: str | None
    error_code: str | None
    #: Runs with an operation whose verdict is false_success (SPEC 4: mark the run unhealthy).
    unhealthy: bool
    created_at: datetime
    updated_at: datetime


class Store(Protocol):
    """The facts about operations, and the decision cached from them."""

    def record_intent(self, intent: Intent) -> bool:
        """Record an intent; True if new (its cached decision is FIRST_DECISION), False for
        an identical repeat. IntentConflictError (after recording the conflict as evidence)
        when the id exists with another hash or key."""
        ...

    def record_attempt(self, attempt: Attempt, *, due_at: datetime | None = None) -> bool:
        """Record a report of an attempt, or complete one recorded `dispatching`; True if new
        (or completed), False for an identical repeat of a report kept. Every other report of
        a recorded number is kept beside it, never refused (SPEC section 4; store/reports.py);
        `facts` gives the reports in recorded order. UnknownOperationError without an intent.
        An undecided, unescalated operation is due from `due_at` (default: the attempt's time)
        unless due earlier."""
        ...

    def record_attempt_and_decide(self, attempt: Attempt, rule: Rule, now: datetime, *,
                                  due_at: datetime | None = None) -> tuple[bool, Decided]:
        """`record_attempt`, then `decide`, in one transaction when the attempt is new: what
        record_attempt answers, and what decide answers."""
        ...

    def record_evidence(self, evidence: Evidence) -> None:
        """Append one piece of evidence (never changed or removed); UnknownOperationError
        without an intent."""
        ...

    def facts(self, operation_id: str) -> Facts:
        """Everything recorded about one operation, in recorded order."""
        ...

    def contract(self, provider: str) -> ProviderContract:
        """The provider's contract; the cautious defaults when none is configured."""
        ...

    def put_contract(self, contract: ProviderContract) -> None:
        """Configure (or reconfigure) a provider's contract."""
        ...

    def decide(self, operation_id: str, rule: Rule, now: datetime) -> Decided:
        """Apply `rule` to the operation's facts and contract and cache its decision, in one
        transaction; only a change of verdict or next action is written (with the schedule
        the rule gives; an escalated operation is never due). The facts, the decision, whether
        a sweeper has escalated the operation to a human, and whether the verdict changed."""
        ...

    def list_operations(self, *, verdict: str | None = None, escalated: bool | None = None,
                        provider: str | None = None, attention: bool | None = None,
                        run_id: str | None = None, after: str | None = None,
                        limit: int = 50) -> list[OperationSummary]:
        """Operations in id order, `limit` at a time, starting after the `after` cursor.
        `escalated`: a human must act (attention.must_act); `attention`: any reason to look
        (attention.reason_of); `run_id`: only those of one agent run. Each summary carries
        its reason."""
        ...

    def providers(self, *, verdict: str | None = None) -> set[str]:
        """The provider names of stored operations (of those whose cached verdict is
        `verdict`)."""
        ...

    def record_delivery(self, delivery: Delivery, evidence: Evidence | None) -> bool:
        """Accept a delivery id once, and record its evidence (if any) in the same
        transaction: False, with nothing written, when the id was accepted before (a replay).
        Ids older than their `keep_for` are forgotten: their signed times cannot come back."""
        ...

    def remove_settled(self, before: datetime, now: datetime, keep_unless: Removable, *,
                       after: str | None = None, limit: int = 500
                       ) -> tuple[list[Facts], str | None]:
        """In one transaction: of up to `limit` settled operations (retention.SETTLED) whose
        verdict was decided before `before`, in id order after the `after` cursor, remove
        every one `keep_unless` allows (facts, contract, now), with all its facts. The facts
        removed, and the cursor to go on from (None when no more were examined)."""
        ...

    def waiting_on_human(self) -> list[Waiting]:
        """Operations that wait on a human, counted by reason (attention.reason_of), each
        with when the longest-waiting one's verdict was decided."""
        ...

    def ready(self) -> None:
        """Return when the store answers a query on its own records; StoreUnavailableError
        when it cannot (unreachable, or an empty or foreign database where it should be)."""
        ...


class Leases(Protocol):
    """The probe schedule and the two leases: one sweeper probes an operation at a time, one
    caller holds the grant to retry it."""

    def claim(self, operation_id: str, holder: str, now: datetime, lease_s: float) -> bool:
        """Lease one operation to `holder` whatever its schedule (an on-demand reconcile)."""
        ...

    def close_rounds(self, holder: str, rounds: Sequence[Round], rule: RoundRule, now: datetime,
                     *, claim: int = 0, lease_s: float = 0.0
                     ) -> tuple[list[Conclusion], list[Intent]]:
        """In one transaction: append each round's evidence, apply `rule` on the operation's
        facts, cache the decision and, while `holder` still holds the probe lease, count the
        round, schedule the next one and release the lease; then lease up to `claim` due
        operations (`due_at` come, lease free) to `holder` for `lease_s`, longest due first.
        The conclusions, and the claimed intents."""
        ...

    def abandon(self, operation_ids: Sequence[str], holder: str, now: datetime) -> None:
        """Count a round for each operation, due again at once if it was due, and release its
        lease, without deciding anything: rounds that could not conclude."""
        ...

    def release_all(self, holder: str) -> int:
        """Give up every probe lease `holder` has (graceful shutdown); how many."""
        ...

    def oldest_due(self, now: datetime) -> datetime | None:
        """When the longest-waiting due operation became due (for the reconcile-lag metric)."""
        ...

    def acquire_retry(self, operation_id: str, holder: str, now: datetime,
                      ttl_s: float, attempt: int | None = None, grant: str | None = None
                      ) -> datetime | None:
        """Grant the retry lease to `holder`, for attempt number `attempt`, bound to `grant`
        (the hash of its token, reconciler.core.grants); its expiry, or None while another caller
        holds it. Asking again as the same holder renews the same lease, under the new grant."""
        ...

    def retry_grant(self, operation_id: str, now: datetime) -> tuple[str, int | None] | None:
        """The holder of the operation's unexpired retry lease and the attempt number it
        allows; None when no lease runs."""
        ...

    def retry_lease(self, operation_id: str, now: datetime) -> Lease | None:
        """The operation's unexpired retry lease, with its grant's hash; None when none runs."""
        ...

    def grant_retry(self, operation_id: str, holder: str, rule: Rule, grantable: Grantable,
                    now: datetime, ttl_s: float, grant: str | None = None
                    ) -> tuple[Decided, datetime | None]:
        """In one transaction: decide as `Store.decide` does; then, when `grantable` gives an
        attempt number for that decision, `acquire_retry` for it. What decide answers, and
        the lease's expiry (None: not granted, or another caller holds the lease)."""
        ...

    def record_granted_attempt(self, attempt: Attempt, holder: str | None, rule: Rule,
                               now: datetime, *, due_at: datetime | None = None,
                               grant: str | None = None) -> tuple[bool, Decided]:
        """In one transaction: an opening (`dispatching`) must be the one the unexpired retry
        lease held by `holder` (and `grant`, when given) allows, and, unless it is recorded
        already (the holder's repeat), the decision drawn now must still allow a retry
        (`grants.opening_allowed`: RetryNotGrantedError otherwise, nothing recorded;
        UnknownOperationError without an intent). A report made without the lease that takes
        the number it allows moves the lease on to the next (`grants.moves_grant`). Then
        `Store.record_attempt_and_decide`, and what it answers."""
        ...


class Journal(Protocol):
    """Append-only run logs with optimistic appends (RunConflictError when the run moved on)."""

    def create(self, run_id: str, data: Mapping[str, Any], at: datetime) -> RunView:
        """Record a new run (its `run_created` event); RunConflictError if the id is taken."""
        ...

    def append(self, view: RunView, kind: EventKind, data: Mapping[str, Any],
               at: datetime) -> RunView:
        """Append one event on top of `view`; raises, writing nothing, when the event is not
        legal for the run or the run moved on since `view` was read."""
        ...

    def load(self, run_id: str) -> RunView:
        """The run, rebuilt from its events; UnknownRunError if there is none."""
        ...

    def events(self, run_id: str, after: int = 0) -> list[RunEvent]:
        """The run's events after sequence number `after`, in order."""
        ...

    def claim(self, run_id: str, holder: str, now: datetime, ttl_s: float, *,
              force: bool = False) -> bool:
        """Take (or renew) the run's lease; False while another worker's lease runs. `force`
        takes it anyway: only for a supervisor that knows the holder is dead."""
        ...

    def release(self, run_id: str, holder: str) -> None:
        """Give up the run's lease if `holder` has it."""
        ...

    def needing_work(self, now: datetime, idle_before: datetime, limit: int) -> list[str]:
        """Live runs (queued, running, awaiting a tool) that no worker advances and no client
        must continue (not paused for a continue request, not awaiting approval): those whose
        lease lapsed, and those nobody has held since `idle_before`; longest waiting first,
        at most `limit`."""
        ...

    def claim_unattended(self, run_id: str, holder: str, now: datetime, ttl_s: float,
                         idle_before: datetime) -> bool:
        """Take the run's lease only if it still needs work as `needing_work` says, atomically:
        of two supervisors that found one run, only one gets it."""
        ...

    def list_runs(self, *, state: str | None = None, correlation_id: str | None = None,
                  unhealthy: bool | None = None, after: str | None = None,
                  limit: int = 50) -> list[RunSummary]:
        """Runs in id order, `limit` at a time, starting after the `after` cursor."""
        ...

    def count_runs(self) -> list[tuple[str, int, datetime]]:
        """Runs by state: (state, how many, when the longest-waiting one last moved)."""
        ...
