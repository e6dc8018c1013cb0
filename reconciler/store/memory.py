"""`MemoryStore`: the receipt store and its leases in a process's memory.

The in-memory twin of `SqlStore` + `SqlLeases`, held to the same behaviour by the contract
suite (tests/test_store_contract.py). Replay and unit tests use it: no migrations, no files.
Nothing survives the process, so a sidecar never serves from it. Thread-safe: one lock, held
for each call as a transaction would be. Each operation is a `MemoryOperation`
(store/memory_operation.py): its facts, their summary folded as they are recorded, and its state.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta

from reconciler.core.attention import must_act
from reconciler.core.domain import (
    Attempt,
    Evidence,
    Facts,
    Intent,
    IntentConflict,
    Outcome,
    ProviderContract,
)
from reconciler.core.errors import (
    IntentConflictError,
    RetryNotGrantedError,
    UnknownOperationError,
)
from reconciler.core.grants import Lease, moves_grant, opening_allowed
from reconciler.core.ports import (
    FIRST_DECISION,
    Conclusion,
    Decided,
    Delivery,
    Grantable,
    OperationSummary,
    Removable,
    Round,
    RoundRule,
    Rule,
    Waiting,
)
from reconciler.core.retention import SETTLED
from reconciler.core.summary import Summary
from reconciler.store.memory_operation import (
    MemoryOperation,
    OperationState,
    cache_decision,
    due_from,
    is_due,
    is_free,
    summary_of,
)


class MemoryStore:
    """A `Store` and its `Leases` in one object: `Ledger(store)`, `RetryGate(ledger, store)`."""

    def __init__(self) -> None:
        # Reentrant: the one-transaction calls are the single calls, under the same lock.
        self._lock = threading.RLock()
        self._operations: dict[str, MemoryOperation] = {}
        self._contracts: dict[str, ProviderContract] = {}
        self._deliveries: dict[tuple[str, str], datetime] = {}

    # -- Store -------------------------------------------------------------------------------

    def record_intent(self, intent: Intent) -> bool:
        with self._lock:
            existing = self._operations.get(intent.operation_id)
            if existing is None:
                verdict, action = FIRST_DECISION
                self._operations[intent.operation_id] = MemoryOperation(
                    intent, OperationState(verdict.value, action, intent.at), Summary(intent))
                return True
            if existing.intent.same_identity(intent):
                return False
            existing.add_evidence(IntentConflict(
                intent.operation_id, intent.at, intent.request_hash, intent.idempotency_key))
        recorded = existing.intent
        raise IntentConflictError(
            f"operation {intent.operation_id!r} is already recorded with request hash "
            f"{recorded.request_hash} and key {recorded.idempotency_key!r}; a different "
            "operation needs a new operation id", operation_id=intent.operation_id)

    def record_attempt(self, attempt: Attempt, *, due_at: datetime | None = None) -> bool:
        with self._lock:
            op = self._require(attempt.operation_id)
            if not op.put_attempt(attempt):
                return False
            due_from(op.state, due_at or attempt.at)
            return True

    def record_attempt_and_decide(self, attempt: Attempt, rule: Rule, now: datetime, *,
                                  due_at: datetime | None = None) -> tuple[bool, Decided]:
        with self._lock:
            return (self.record_attempt(attempt, due_at=due_at),
                    self.decide(attempt.operation_id, rule, now))

    def record_evidence(self, evidence: Evidence) -> None:
        with self._lock:
            self._require(evidence.operation_id).add_evidence(evidence)

    def facts(self, operation_id: str) -> Facts:
        with self._lock:
            return self._require(operation_id).facts()

    def contract(self, provider: str) -> ProviderContract:
        return self._contracts.get(provider) or ProviderContract(name=provider)

    def put_contract(self, contract: ProviderContract) -> None:
        self._contracts[contract.name] = contract

    def decide(self, operation_id: str, rule: Rule, now: datetime) -> Decided:
        with self._lock:
            op = self._require(operation_id)
            scheduled = rule(op.summary, self.contract(op.intent.provider), now)
            changed = op.state.verdict != scheduled.decision.verdict.value
            if cache_decision(op.state, scheduled.decision, now):
                op.state.due_at = None if op.state.escalated else scheduled.due_at
            return Decided(op.snapshot(), scheduled.decision, op.state.escalated, changed)

    def list_operations(self, *, verdict: str | None = None, escalated: bool | None = None,
                        provider: str | None = None, attention: bool | None = None,
                        run_id: str | None = None, after: str | None = None,
                        limit: int = 50) -> list[OperationSummary]:
        with self._lock:
            chosen = [summary_of(op_id, op) for op_id, op in self._operations.items()
                      if (verdict is None or op.state.verdict == verdict)
                      and (provider is None or op.intent.provider == provider)
                      and (run_id is None or op.intent.run_id == run_id)
                      and (after is None or op_id > after)]
        chosen = [s for s in chosen
                  if (escalated is None or must_act(s.verdict, s.next_action, s.escalated)
                      == escalated)
                  and (attention is None or (s.reason is not None) == attention)]
        return sorted(chosen, key=lambda s: s.operation_id)[:limit]

    def providers(self, *, verdict: str | None = None) -> set[str]:
        with self._lock:
            return {op.intent.provider for op in self._operations.values()
                    if verdict is None or op.state.verdict == verdict}

    def record_delivery(self, delivery: Delivery, evidence: Evidence | None) -> bool:
        with self._lock:
            if evidence is not None:
                self._require(evidence.operation_id)
            if delivery.keep_for is not None:
                horizon = delivery.received_at - delivery.keep_for
                self._deliveries = {key: at for key, at in self._deliveries.items()
                                    if key[0] != delivery.scheme or at >= horizon}
            key = (delivery.scheme, delivery.delivery_id)
            if key in self._deliveries:
                return False
            if evidence is not None:
                self._require(evidence.operation_id).add_evidence(evidence)
            self._deliveries[key] = delivery.received_at
            return True

    def remove_settled(self, before: datetime, now: datetime, keep_unless: Removable, *,
                       after: str | None = None, limit: int = 500
                       ) -> tuple[list[Facts], str | None]:
        with self._lock:
            ids = sorted(op_id for op_id, op in self._operations.items()
                         if op.state.verdict in SETTLED and op.state.updated_at < before
                         and (after is None or op_id > after))[:limit]
            removed = [facts for facts in (self._operations[op].facts() for op in ids)
                       if keep_unless(facts, self.contract(facts.intent.provider), now)]
            for facts in removed:
                del self._operations[facts.intent.operation_id]
        return removed, ids[-1] if len(ids) == limit else None

    def waiting_on_human(self) -> list[Waiting]:
        with self._lock:
            waiting = [summary_of(op_id, op) for op_id, op in self._operations.items()]
        by_reason: dict[str, list[datetime]] = {}
        for s in waiting:
            if s.reason is not None:
                by_reason.setdefault(s.reason, []).append(s.updated_at)
        return [Waiting(reason, len(times), min(times))
                for reason, times in sorted(by_reason.items())]

    def ready(self) -> None:
        return None

    # -- Leases ------------------------------------------------------------------------------

    def claim(self, operation_id: str, holder: str, now: datetime, lease_s: float) -> bool:
        with self._lock:
            op = self._operations.get(operation_id)
            if op is None or not (is_free(op.state.lease_expires_at, now)
                                  or op.state.lease_holder == holder):
                return False
            op.state.lease_holder = holder
            op.state.lease_expires_at = now + timedelta(seconds=lease_s)
            return True

    def close_rounds(self, holder: str, rounds: Sequence[Round], rule: RoundRule, now: datetime,
                     *, claim: int = 0, lease_s: float = 0.0
                     ) -> tuple[list[Conclusion], list[Intent]]:
        with self._lock:
            concluded = [self._conclude(holder, r, rule, now) for r in rounds]
            return concluded, self._claim_due(holder, now, lease_s, claim)

    def abandon(self, operation_ids: Sequence[str], holder: str, now: datetime) -> None:
        with self._lock:
            for op_id in operation_ids:
                op = self._operations.get(op_id)
                if op is not None and op.state.lease_holder == holder:
                    op.state.probe_count += 1
                    op.state.due_at = None if op.state.due_at is None else now
                    op.state.lease_holder = op.state.lease_expires_at = None

    def release_all(self, holder: str) -> int:
        with self._lock:
            held = [op.state for op in self._operations.values()
                    if op.state.lease_holder == holder]
            for state in held:
                state.lease_holder = state.lease_expires_at = None
            return len(held)

    def oldest_due(self, now: datetime) -> datetime | None:
        with self._lock:
            due = [op.state.due_at for op in self._operations.values()
                   if op.state.due_at is not None and op.state.due_at <= now]
            return min(due, default=None)

    def acquire_retry(self, operation_id: str, holder: str, now: datetime,
                      ttl_s: float, attempt: int | None = None, grant: str | None = None
                      ) -> datetime | None:
        with self._lock:
            op = self._operations.get(operation_id)
            if op is None or not (is_free(op.state.retry_lease_expires_at, now)
                                  or op.state.retry_holder == holder):
                return None
            expires = now + timedelta(seconds=ttl_s)
            op.state.retry_holder, op.state.retry_lease_expires_at = holder, expires
            op.state.retry_attempt, op.state.retry_grant = attempt, grant
            return expires

    def grant_retry(self, operation_id: str, holder: str, rule: Rule, grantable: Grantable,
                    now: datetime, ttl_s: float, grant: str | None = None
                    ) -> tuple[Decided, datetime | None]:
        with self._lock:
            decided = self.decide(operation_id, rule, now)
            number = grantable(decided.facts, decided.decision)
            return decided, None if number is None else self.acquire_retry(
                operation_id, holder, now, ttl_s, number, grant)

    def record_granted_attempt(self, attempt: Attempt, holder: str | None, rule: Rule,
                               now: datetime, *, due_at: datetime | None = None,
                               grant: str | None = None) -> tuple[bool, Decided]:
        # The same rules as the SQL store's guard (store/leases.py), under the one lock.
        with self._lock:
            op = self._require(attempt.operation_id)
            lease = self.retry_lease(attempt.operation_id, now)
            recorded = attempt.number in op.numbered
            if attempt.outcome is not Outcome.DISPATCHING:
                if moves_grant(lease, attempt, holder, grant, recorded):
                    op.state.retry_attempt = attempt.number + 1
            elif not opening_allowed(lease, attempt, holder, grant, recorded, None if recorded
                                     else self.decide(attempt.operation_id, rule, now).decision):
                raise RetryNotGrantedError.opening(attempt.operation_id, attempt.number)
            return self.record_attempt_and_decide(attempt, rule, now, due_at=due_at)

    def retry_grant(self, operation_id: str, now: datetime) -> tuple[str, int | None] | None:
        lease = self.retry_lease(operation_id, now)
        return None if lease is None else (lease.holder, lease.attempt)

    def retry_lease(self, operation_id: str, now: datetime) -> Lease | None:
        with self._lock:
            op = self._operations.get(operation_id)
            if op is None or op.state.retry_holder is None or is_free(
                    op.state.retry_lease_expires_at, now):
                return None
            return Lease(op.state.retry_holder, op.state.retry_attempt, op.state.retry_grant)

    # -- inside the lock ---------------------------------------------------------------------

    def _require(self, operation_id: str) -> MemoryOperation:
        op = self._operations.get(operation_id)
        if op is None:
            raise UnknownOperationError(
                f"no intent is recorded for operation {operation_id!r}; record the intent "
                "before its attempts and evidence", operation_id=operation_id)
        return op

    def _conclude(self, holder: str, rnd: Round, rule: RoundRule, now: datetime) -> Conclusion:
        op = self._operations[rnd.intent.operation_id]
        for evidence in rnd.evidence:
            op.add_evidence(evidence)
        state = op.state
        scheduled = rule(op.summary, self.contract(op.intent.provider), state.probe_count + 1)
        was_escalated = state.escalated
        changed = state.verdict != scheduled.decision.verdict.value
        cache_decision(state, scheduled.decision, now)
        if state.lease_holder == holder:
            state.probe_count += scheduled.spent
            state.escalated = state.escalated or scheduled.escalate
            state.due_at = None if state.escalated else scheduled.due_at
            state.lease_holder = state.lease_expires_at = None
        return Conclusion(op.snapshot(), scheduled.decision, was_escalated, scheduled.escalate,
                          changed)

    def _claim_due(self, holder: str, now: datetime, lease_s: float,
                   limit: int) -> list[Intent]:
        if limit <= 0:
            return []
        due = [op for op in self._operations.values()
               if is_due(op.state, now) and is_free(op.state.lease_expires_at, now)]
        due.sort(key=lambda op: op.state.due_at or now)
        claimed = due[:limit]
        for op in claimed:
            op.state.lease_holder = holder
            op.state.lease_expires_at = now + timedelta(seconds=lease_s)
        return [op.intent for op in claimed]
