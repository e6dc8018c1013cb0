"""`SqlStore`: the receipt store on SQLAlchemy (SQLite by default, PostgreSQL for fleets)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from types import TracebackType
from typing import Any

import sqlalchemy
from sqlalchemy import Connection, Engine, Insert, Table, bindparam, delete, insert
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError
from sqlmodel import Session, col, select

from reconciler.core.domain import (
    Attempt,
    Evidence,
    Facts,
    Intent,
    IntentConflict,
    ProviderContract,
)
from reconciler.core.errors import IntentConflictError, StoreUnavailableError
from reconciler.core.ports import (
    FIRST_DECISION,
    Decided,
    Delivery,
    OperationSummary,
    Removable,
    Rule,
    Waiting,
)
from reconciler.core.retention import SETTLED
from reconciler.store import attempts, decisions, folds, listing, rows
from reconciler.store.commits import GroupCommitter, Write
from reconciler.store.decisions import Deciding, decide_in
from reconciler.store.tables import (
    AttemptRow,
    EvidenceRow,
    IntentRow,
    ProviderRow,
    StateRow,
    WebhookDeliveryRow,
)


def _insert(model: Any) -> Insert:
    table: Table = model.__table__
    return insert(table)


# Statements built once, not per call; the inserts are Core, so recording a fact costs no ORM
# unit of work.
INSERT_INTENT = _insert(IntentRow)
INSERT_STATE = _insert(StateRow)
#: A new state row's fact counts (store/folds.py), given: left to their Python-side default,
#: SQLAlchemy computes them around the statement, which takes this hot insert off the statement
#: driver (store/driver.py; tests/test_store_driver_fallback.py).
UNCOUNTED = {"attempt_rows": 0, "completions": 0, "evidence_rows": 0}
INSERT_EVIDENCE = _insert(EvidenceRow)
INSERT_DELIVERY = _insert(WebhookDeliveryRow)


def appending(evidence: Evidence) -> list[tuple[Any, dict[str, Any]]]:
    """The steps that append `evidence`: counted first (store/folds.py)."""
    return [folds.counted(folds.COUNT_EVIDENCE, evidence.operation_id),
            (INSERT_EVIDENCE, rows.evidence_values(evidence))]

_PROVIDER: Table = ProviderRow.__table__  # type: ignore[attr-defined]
PROVIDER = sqlalchemy.select(_PROVIDER).where(_PROVIDER.c.name == bindparam("name"))
#: The execution option of read transactions (schema.make_engine begins them deferred).
READING_OPTION = "reconciler_reading"
READING = {READING_OPTION: True}


class SqlStore:
    """The store on one SQLAlchemy engine. Thread-safe: each call has its own transaction, and
    facts recorded at the same time by several threads share one commit (`GroupCommitter`)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._contracts: dict[str, ProviderContract] = {}

    @property
    def engine(self) -> Engine:
        return self._engine

    @engine.setter
    def engine(self, engine: Engine) -> None:
        """Another engine (a failover; a test's outage) takes the readers and the committer
        with it, so that no transaction goes on reaching the old one."""
        previous: GroupCommitter | None = getattr(self, "_committer", None)
        self._engine = engine
        # Read transactions take no write lock: on SQLite a deferred BEGIN under WAL, where
        # readers and the writer never wait on each other (schema.make_engine).
        self._reader = engine.execution_options(**READING)
        self._committer = GroupCommitter(engine)
        # Summaries kept from the old database vouch for nothing in this one.
        self.deciding = Deciding(self.contract_in)
        if previous is not None:
            previous.close()  # the connection it holds goes back to the old engine's pool

    def close(self) -> None:
        """Give every connection back and close them: the group committer's first (it holds
        one between commits; disposed of before it, the pool cannot take it back and the
        database session stays open until the garbage collector finds it), then the pool's."""
        self._committer.close()
        self._engine.dispose()

    @contextmanager
    def session(self, *, read: bool = False) -> Iterator[Session]:
        """One transaction (`read`: one that writes nothing); a store that cannot be reached
        is a StoreUnavailableError."""
        with _reachable, Session(self._reader if read else self.engine,
                                   expire_on_commit=False) as session, session.begin():
            yield session

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A read transaction on a Core connection (no ORM session)."""
        with _reachable, self._reader.begin() as conn:
            yield conn

    def commit(self, write: Write, key: str = "") -> None:
        """Run `write` durably, in a transaction shared with other threads' writes; `key`: the
        operation whose rows it touches (`GroupCommitter.commit`)."""
        with _reachable:
            self._committer.commit(write, key)

    def record_intent(self, intent: Intent) -> bool:
        # The state row is born with the intent, so that deciding only ever updates it: two
        # first decisions racing cannot both insert it. Until the first decision, nothing is
        # known: indeterminate.
        try:
            self.commit([(INSERT_INTENT, rows.intent_values(intent)),
                         (INSERT_STATE,
                          rows.state_values(intent, *FIRST_DECISION) | UNCOUNTED)],
                        intent.operation_id)
            return True
        except IntegrityError:
            # The id is taken: a repeat, a conflict, or a race lost to another first recording.
            # Compare against what is recorded (an intent never changes), in a read
            # transaction: on SQLite a write one would wait for the write lock, on the event
            # loop when a route runs this there (service.wiring.Wiring.call).
            pass
        with self.reading() as conn:
            existing = decisions.head(conn, intent.operation_id)
        if rows.intent_of(existing).same_identity(intent):
            return False
        self.commit(appending(IntentConflict(intent.operation_id, intent.at,
                                             intent.request_hash, intent.idempotency_key)),
                    intent.operation_id)
        raise IntentConflictError(
            f"operation {intent.operation_id!r} is already recorded with request hash "
            f"{existing.request_hash} and key {existing.idempotency_key!r}; a different "
            "operation needs a new operation id", operation_id=intent.operation_id)

    def record_attempt(self, attempt: Attempt, *, due_at: datetime | None = None) -> bool:
        return self._attempt(attempt, due_at, None)[0]

    def record_attempt_and_decide(self, attempt: Attempt, rule: Rule, now: datetime, *,
                                  due_at: datetime | None = None,
                                  guard: Callable[[Connection], object] | None = None
                                  ) -> tuple[bool, Decided]:
        """`guard`: run first in the same transaction; what it raises records nothing (the
        retry grant an opening attempt needs, SqlLeases.record_granted_attempt)."""
        created, decided = self._attempt(attempt, due_at, (rule, now), guard)
        assert decided is not None
        return created, decided

    def _attempt(self, attempt: Attempt, due_at: datetime | None,
                 deciding: tuple[Rule, datetime] | None,
                 guard: Callable[[Connection], object] | None = None
                 ) -> tuple[bool, Decided | None]:
        """Record the attempt and, with `deciding`, decide in the same transaction."""
        due = attempts.due_of(attempt, due_at)
        decided: list[Decided] = []
        if deciding is None:
            write = attempts.recording(attempt, due)
        else:
            rule, now = deciding

            def decide(conn: Connection) -> None:
                judged, cached = decide_in(conn, self.deciding, attempt.operation_id, rule,
                                           now)
                if not cached:  # a new verdict cached its own due time (store/attempts.py)
                    attempts.make_due(conn, due)
                decided[:] = [judged]

            write = [*attempts.inserting(attempt), decide]
        if guard is not None:
            write.insert(0, guard)
        try:
            self.commit(write, attempt.operation_id)
            return True, decided[0] if decided else None
        except IntegrityError as exc:
            # No such operation, or the number is taken (a repeat, a completion, another
            # report of the attempt, a race lost to another first report): read back to tell
            # which and keep it, off the hot path.
            created = self._settle_attempt(attempt, due, exc)
        return created, self.decide(attempt.operation_id, *deciding) if deciding else None

    def _settle_attempt(self, attempt: Attempt, due: dict[str, Any],
                        refused: IntegrityError) -> bool:
        """After the attempt's first-report insert was refused: `attempts.settle`, in the
        group committer's transaction: on SQLite a write transaction of its own would wait for
        the write lock, on the event loop when a route runs this there
        (service.wiring.Wiring.call)."""
        settled: list[bool] = []

        def settle(conn: Connection) -> None:
            settled[:] = [attempts.settle(conn, attempt, due, refused)]

        self.commit([settle], attempt.operation_id)
        return settled[0]

    def record_evidence(self, evidence: Evidence) -> None:
        try:
            self.commit(appending(evidence), evidence.operation_id)
        except IntegrityError as exc:
            with self.reading() as conn:  # not the write lock: Wiring.call may run this on the loop
                decisions.head(conn, evidence.operation_id)
            raise attempts.ahead_of_intent(evidence.operation_id, "evidence") from exc

    def facts(self, operation_id: str) -> Facts:
        with self.reading() as conn:
            return decisions.facts_of(conn, decisions.head(conn, operation_id))

    def contract(self, provider: str) -> ProviderContract:
        cached = self._contracts.get(provider)
        if cached is not None:
            return cached
        with self.reading() as conn:
            return self.contract_in(conn, provider)

    def put_contract(self, contract: ProviderContract) -> None:
        with self.session() as s:
            s.merge(rows.provider_row(contract))
        self._contracts[contract.name] = contract

    def decide(self, operation_id: str, rule: Rule, now: datetime) -> Decided:
        """Apply `rule` to the operation's facts and contract and cache its decision, all in one
        transaction: the cached verdict is always the one the facts it was drawn from give.

        Only a change is written: a verdict read again (every GET, every gate question) must not
        cost a durable write, and `updated_at` keeps saying when the verdict last changed. So
        it is decided first in a read transaction, and only a change is decided again, from
        what is recorded then, in a write transaction (shared with other writers' commits).
        """
        with self.reading() as conn:
            decided, stale = decisions.decide_in(conn, self.deciding, operation_id, rule,
                                                 now, write=False)
        if not stale:
            return decided
        again: list[Decided] = []

        def decide(conn: Connection) -> None:
            again[:] = [decisions.decide_in(conn, self.deciding, operation_id, rule, now)[0]]

        self.commit([decide], operation_id)
        return again[0]

    def contract_in(self, s: Session | Connection, provider: str) -> ProviderContract:
        """The provider's contract, read in the transaction `s` when it is not cached."""
        # Contracts come from configuration and change only through put_contract, so every
        # verdict need not pay a round trip for one.
        cached = self._contracts.get(provider)
        if cached is None:
            row = s.execute(PROVIDER, {"name": provider}).first()
            cached = rows.contract_of(row) if row else ProviderContract(name=provider)
            self._contracts[provider] = cached
        return cached

    def list_operations(self, *, verdict: str | None = None, escalated: bool | None = None,
                        provider: str | None = None, attention: bool | None = None,
                        run_id: str | None = None, after: str | None = None,
                        limit: int = 50) -> list[OperationSummary]:
        with self.session(read=True) as s:
            return listing.operations(s, verdict=verdict, escalated=escalated,
                                      provider=provider, attention=attention, run_id=run_id,
                                      after=after, limit=limit)

    def remove_settled(self, before: datetime, now: datetime, keep_unless: Removable, *,
                       after: str | None = None, limit: int = 500
                       ) -> tuple[list[Facts], str | None]:
        query = select(StateRow.operation_id).where(
            col(StateRow.verdict).in_(SETTLED), col(StateRow.updated_at) < before)
        if after is not None:
            query = query.where(col(StateRow.operation_id) > after)
        query = query.order_by(col(StateRow.operation_id)).limit(limit)
        with self.session() as s:
            ids = list(s.exec(query.with_for_update()).all()
                       if self.engine.dialect.name == "postgresql" else s.exec(query).all())
            if not ids:
                return [], None
            intents = {i.operation_id: rows.intent_of(i) for i in s.exec(
                select(IntentRow).where(col(IntentRow.operation_id).in_(ids)))}
            attempts, evidence = decisions.recorded(s.connection(), ids)
            removed = [facts for facts in (
                Facts(intents[op], tuple(attempts[op]), tuple(evidence[op])) for op in ids)
                if keep_unless(facts, self.contract_in(s, facts.intent.provider), now)]
            gone = [f.intent.operation_id for f in removed]
            if gone:
                for table in (EvidenceRow, AttemptRow, StateRow, IntentRow):
                    s.execute(delete(table).where(col(table.operation_id).in_(gone)))
                self.deciding.folds.forget(gone)
        return removed, ids[-1] if len(ids) == limit else None

    def waiting_on_human(self) -> list[Waiting]:
        with self.session(read=True) as s:
            return listing.waiting_on_human(s)

    def providers(self, *, verdict: str | None = None) -> set[str]:
        with self.session(read=True) as s:
            return listing.providers(s, verdict=verdict)

    def record_delivery(self, delivery: Delivery, evidence: Evidence | None) -> bool:
        with self.session() as s:
            if evidence is not None:
                self._require(s, evidence.operation_id)
            if delivery.keep_for is not None:
                s.execute(delete(WebhookDeliveryRow).where(
                    col(WebhookDeliveryRow.provider) == delivery.scheme,
                    col(WebhookDeliveryRow.received_at)
                    < delivery.received_at - delivery.keep_for))
            try:
                with s.begin_nested():
                    s.execute(INSERT_DELIVERY, {"provider": delivery.scheme,
                                                "delivery_id": delivery.delivery_id,
                                                "received_at": delivery.received_at})
            except IntegrityError:
                return False
            if evidence is not None:
                for step in appending(evidence):
                    s.execute(*step)
        return True

    def ready(self) -> None:
        try:
            with self.session(read=True) as s:
                s.exec(select(IntentRow.operation_id).limit(1)).first()
        except SQLAlchemyError as exc:  # a foreign database: no table of ours
            raise StoreUnavailableError(f"receipt store not ready: {exc}") from exc

    @staticmethod
    def _require(s: Session, operation_id: str) -> IntentRow:
        intent = s.get(IntentRow, operation_id)
        if intent is None:
            raise decisions.unknown(operation_id)
        return intent


class _Reachable:
    """A store that cannot be reached is a StoreUnavailableError (503, try again later). A
    class, not a `contextmanager` generator: entered on every store call, the generator's
    set-up cost 1.1 us a time against 0.2."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if isinstance(exc, OperationalError):
            raise StoreUnavailableError(f"receipt store unavailable: {exc.orig}") from exc


#: It keeps no state: one serves every call, from every thread.
_reachable = _Reachable()
