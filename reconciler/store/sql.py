"""`SqlStore`: the receipt store on SQLAlchemy (SQLite by default, PostgreSQL for fleets)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlmodel import Session, col, select

from reconciler.domain import (
    Attempt,
    Decision,
    Evidence,
    Facts,
    Intent,
    IntentConflict,
    ProviderContract,
)
from reconciler.errors import (
    AttemptConflictError,
    IntentConflictError,
    StoreUnavailableError,
    UnknownOperationError,
)
from reconciler.store import FIRST_DECISION, rows
from reconciler.store.tables import AttemptRow, EvidenceRow, IntentRow, ProviderRow, StateRow

#: A pure decision rule: facts, contract and time in, decision out (`verdicts.evaluate`).
Rule = Callable[[Facts, ProviderContract, datetime], Decision]


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


class SqlStore:
    """The store on one SQLAlchemy engine. Thread-safe: each call has its own session."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._contracts: dict[str, ProviderContract] = {}

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction; a store that cannot be reached is a StoreUnavailableError."""
        try:
            with Session(self.engine, expire_on_commit=False) as session, session.begin():
                yield session
        except OperationalError as exc:
            raise StoreUnavailableError(f"receipt store unavailable: {exc.orig}") from exc

    def record_intent(self, intent: Intent) -> bool:
        try:
            with self.session() as s:
                existing = s.get(IntentRow, intent.operation_id)
                if existing is None:
                    s.add(rows.intent_row(intent))
                    # The state row is born with the intent, so that deciding only ever updates
                    # it: two first decisions racing cannot both insert it. Until the first
                    # decision, nothing is known: indeterminate.
                    verdict, action = FIRST_DECISION
                    s.add(StateRow(operation_id=intent.operation_id, verdict=verdict.value,
                                   next_action=action, updated_at=intent.at))
                    s.flush()
                    return True
        except IntegrityError:
            # Two first recordings raced; the loser compares against the winner below.
            pass
        with self.session() as s:
            existing = s.get(IntentRow, intent.operation_id)
            assert existing is not None
            if rows.intent_of(existing).same_identity(intent):
                return False
            s.add(rows.evidence_row(IntentConflict(
                intent.operation_id, intent.at, intent.request_hash, intent.idempotency_key)))
        raise IntentConflictError(
            f"operation {intent.operation_id!r} is already recorded with request hash "
            f"{existing.request_hash} and key {existing.idempotency_key!r}; a different "
            "operation needs a new operation id", operation_id=intent.operation_id)

    def record_attempt(self, attempt: Attempt) -> bool:
        find = select(AttemptRow).where(AttemptRow.operation_id == attempt.operation_id,
                                        AttemptRow.number == attempt.number)
        try:
            with self.session() as s:
                self._require(s, attempt.operation_id)
                existing = s.exec(find).first()
                if existing is None:
                    s.add(rows.attempt_row(attempt))
                    s.flush()
                    return True
        except IntegrityError:
            # Two first recordings of this attempt raced; the loser compares against the winner.
            with self.session() as s:
                existing = s.exec(find).first()
        assert existing is not None
        if rows.attempt_of(existing) == attempt:
            return False
        raise AttemptConflictError(
            f"attempt {attempt.number} of {attempt.operation_id!r} is already recorded with "
            "other facts; record the next attempt with the next number",
            operation_id=attempt.operation_id)

    def record_evidence(self, evidence: Evidence) -> None:
        with self.session() as s:
            self._require(s, evidence.operation_id)
            s.add(rows.evidence_row(evidence))

    def facts(self, operation_id: str) -> Facts:
        with self.session() as s:
            return self._facts(s, operation_id)

    def contract(self, provider: str) -> ProviderContract:
        cached = self._contracts.get(provider)
        if cached is not None:
            return cached
        with self.session() as s:
            return self._contract(s, provider)

    def put_contract(self, contract: ProviderContract) -> None:
        with self.session() as s:
            s.merge(rows.provider_row(contract))
        self._contracts[contract.name] = contract

    def decide(self, operation_id: str, rule: Rule,
               now: datetime) -> tuple[Facts, Decision, bool]:
        """Apply `rule` to the operation's facts and contract and cache its decision, all in one
        transaction: the cached verdict is always the one the facts it was drawn from give.
        Returns the facts, the decision, and whether the operation is escalated.

        Only a change is written: a verdict read again (every GET, every gate question) must not
        cost a durable write, and `updated_at` keeps saying when the verdict last changed.
        """
        with self.session() as s:
            facts = self._facts(s, operation_id)
            decision = rule(facts, self._contract(s, facts.intent.provider), now)
            state = s.get(StateRow, operation_id)
            assert state is not None  # born with the intent (record_intent)
            verdict, action = decision.verdict.value, decision.next_action
            if (state.verdict, state.next_action) != (verdict, action):
                state.verdict, state.next_action, state.updated_at = verdict, action, now
            return facts, decision, state.escalated

    def _facts(self, s: Session, operation_id: str) -> Facts:
        intent = self._require(s, operation_id)
        attempts = s.exec(select(AttemptRow).where(AttemptRow.operation_id == operation_id)
                          .order_by(col(AttemptRow.number))).all()
        evidence = s.exec(select(EvidenceRow).where(EvidenceRow.operation_id == operation_id)
                          .order_by(col(EvidenceRow.id))).all()
        return Facts(intent=rows.intent_of(intent),
                     attempts=tuple(rows.attempt_of(a) for a in attempts),
                     evidence=tuple(rows.evidence_of(e) for e in evidence))

    def _contract(self, s: Session, provider: str) -> ProviderContract:
        # Contracts come from configuration and change only through put_contract, so every
        # verdict need not pay a round trip for one.
        cached = self._contracts.get(provider)
        if cached is None:
            row = s.get(ProviderRow, provider)
            cached = rows.contract_of(row) if row else ProviderContract(name=provider)
            self._contracts[provider] = cached
        return cached

    def list_operations(self, *, verdict: str | None = None, escalated: bool | None = None,
                        after: str | None = None, limit: int = 50) -> list[OperationSummary]:
        """Operations in id order, `limit` at a time, starting after the `after` cursor."""
        query = select(IntentRow, StateRow).join(
            StateRow, col(StateRow.operation_id) == col(IntentRow.operation_id))
        if verdict is not None:
            query = query.where(StateRow.verdict == verdict)
        if escalated is not None:
            query = query.where(StateRow.escalated == escalated)
        if after is not None:
            query = query.where(col(IntentRow.operation_id) > after)
        query = query.order_by(col(IntentRow.operation_id)).limit(limit)
        with self.session() as s:
            return [OperationSummary(i.operation_id, i.provider, i.action, st.verdict,
                                     st.next_action, st.escalated, st.updated_at)
                    for i, st in s.exec(query).all()]

    @staticmethod
    def _require(s: Session, operation_id: str) -> IntentRow:
        intent = s.get(IntentRow, operation_id)
        if intent is None:
            raise UnknownOperationError(
                f"no intent is recorded for operation {operation_id!r}; record the intent "
                "before its attempts and evidence", operation_id=operation_id)
        return intent
