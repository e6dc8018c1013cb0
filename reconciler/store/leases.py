"""Leases and the probe schedule, in the operation_state table.

Two kinds of lease, both a holder and an expiry on the operation's state row:

- the *probe lease*: one sweeper (thread or process) probes an operation at a time;
- the *retry lease*: one caller holds the grant to retry an operation, for one attempt number,
  bound to the hash of the grant's token (the token itself is the caller's, never stored).

    claim ───────────────── lease_expires_at ──────────────▶
      │ probes, then `close_rounds`     │ a crashed holder's lease lapses here;
      │ records and releases early      │ any sweeper may claim the operation again

Every claim is a single conditional UPDATE (or SELECT ... FOR UPDATE SKIP LOCKED on PostgreSQL),
so two replicas sharing one database never both win.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy
from sqlalchemy import ColumnElement, Connection, Table, bindparam, case, func, or_, update
from sqlmodel import col, select

from reconciler.core.domain import Attempt, Intent, Outcome
from reconciler.core.errors import RetryNotGrantedError
from reconciler.core.grants import Lease, moves_grant, opening_allowed
from reconciler.core.ports import Conclusion, Decided, Grantable, Round, RoundRule, Rule
from reconciler.store import decisions, rows
from reconciler.store.attempts import ATTEMPT_NUMBERED
from reconciler.store.decisions import Deciding, decide_in
from reconciler.store.driver import DriverStatements
from reconciler.store.rounds import close_rounds
from reconciler.store.sql import SqlStore
from reconciler.store.tables import IntentRow, StateRow

_STATE: Table = StateRow.__table__  # type: ignore[attr-defined]
_INTENT: Table = IntentRow.__table__  # type: ignore[attr-defined]
# Built once: the retry lease is asked for on every retry check.
_TAKE_RETRY = (update(_STATE)
               .where(_STATE.c.operation_id == bindparam("op"),
                      or_(_STATE.c.retry_lease_expires_at.is_(None),
                          _STATE.c.retry_lease_expires_at < bindparam("now"),
                          _STATE.c.retry_holder == bindparam("holder")))
               .values(retry_holder=bindparam("holder"),
                       retry_lease_expires_at=bindparam("expires"),
                       retry_attempt=bindparam("number"),
                       retry_grant=bindparam("grant")))
_RETRY_GRANT = (sqlalchemy.select(_STATE.c.retry_holder, _STATE.c.retry_attempt,
                                  _STATE.c.retry_grant)
                .where(_STATE.c.operation_id == bindparam("op"),
                       _STATE.c.retry_holder.is_not(None),
                       _STATE.c.retry_lease_expires_at >= bindparam("now")))
_RETRY_GRANT_LOCKED = _RETRY_GRANT.with_for_update()
#: An attempt reported without the grant took the number the grant allows: the holder's grant
#: moves on to the next one (SPEC rule 6: a report never takes the real holder's grant away).
_MOVE_GRANT = (update(_STATE)
               .where(_STATE.c.operation_id == bindparam("op"),
                      _STATE.c.retry_attempt == bindparam("number"))
               .values(retry_attempt=bindparam("number") + 1))


# A sweep's claim, in three statements built once (Core, not the ORM: a claim of 8 cost more in
# statement building and ORM objects than in SQL). State rows first, through the partial index
# of due rows only; their intents after.
_DUE = (sqlalchemy.select(_STATE.c.operation_id)
        .where(_STATE.c.due_at <= bindparam("now"),
               or_(_STATE.c.lease_expires_at.is_(None),
                   _STATE.c.lease_expires_at < bindparam("now")))
        .order_by(_STATE.c.due_at)
        .limit(bindparam("limit", type_=sqlalchemy.Integer))
        .with_for_update(skip_locked=True))
_LEASE = (update(_STATE).where(_STATE.c.operation_id.in_(bindparam("ids", expanding=True)))
          .values(lease_holder=bindparam("holder"), lease_expires_at=bindparam("expires")))
_INTENTS = sqlalchemy.select(_INTENT).where(
    _INTENT.c.operation_id.in_(bindparam("ids", expanding=True)))


def _take_retry(conn: Connection, operation_id: str, holder: str, now: datetime,
                expires: datetime, number: int | None, grant: str | None) -> bool:
    """The retry lease to `holder` for attempt `number` under the token hash `grant`, unless
    another's runs: taken?"""
    # On the driver's cursor (store/driver.py): through `Connection.execute` this UPDATE cost
    # 18 us of CPU on SQLite, here 8 us (asked on every retry check).
    return DriverStatements.of(conn.dialect).execute(conn, _TAKE_RETRY, {
        "op": operation_id, "now": now, "holder": holder, "expires": expires,
        "number": number, "grant": grant}) == 1


def _lease_of(conn: Connection, operation_id: str, now: datetime, *, locked: bool = False
              ) -> Lease | None:
    found = DriverStatements.of(conn.dialect).select(
        conn, _RETRY_GRANT_LOCKED if locked else _RETRY_GRANT, {"op": operation_id, "now": now})
    return (Lease(found[0].retry_holder, found[0].retry_attempt, found[0].retry_grant)
            if found else None)


def _granted(conn: Connection, deciding: Deciding, attempt: Attempt, holder: str | None,
             grant: str | None, rule: Rule, now: datetime) -> None:
    """In the transaction recording `attempt`, before it: `opening_allowed` on the live lease,
    read locked (PostgreSQL; SQLite's write transaction excludes every other writer), so no
    grant to another caller can come between this check and the commit of the attempt; an
    unrecorded opening is decided first (a grant lapses with the verdict it rests on). A report
    `moves_grant`: the lease moves on past the number it took, in the same transaction."""
    operation_id = attempt.operation_id
    lease = _lease_of(conn, operation_id, now, locked=True)
    driver = DriverStatements.of(conn.dialect)
    recorded = bool(driver.select(conn, ATTEMPT_NUMBERED, {"op": operation_id,
                                                           "number": attempt.number}))
    if attempt.outcome is not Outcome.DISPATCHING:
        if moves_grant(lease, attempt, holder, grant, recorded):
            driver.execute(conn, _MOVE_GRANT, {"op": operation_id, "number": attempt.number})
        return
    decided = (None if recorded else
               decide_in(conn, deciding, operation_id, rule, now, write=False)[0].decision)
    if not opening_allowed(lease, attempt, holder, grant, recorded, decided):
        decisions.head(conn, operation_id)  # UnknownOperationError without an intent
        raise RetryNotGrantedError.opening(operation_id, attempt.number)


def _free(expires: Any, now: datetime) -> ColumnElement[bool]:
    return or_(col(expires).is_(None), col(expires) < now)


def _claim_due(conn: Connection, holder: str, now: datetime, lease_s: float,
               limit: int) -> list[Intent]:
    driver = DriverStatements.of(conn.dialect)
    ids = [row.operation_id for row in driver.select(conn, _DUE, {"now": now, "limit": limit})]
    if not ids:
        return []
    driver.execute(conn, _LEASE, {"ids": ids, "holder": holder,
                                  "expires": now + timedelta(seconds=lease_s)})
    found = {row.operation_id: rows.intent_of(row)
             for row in driver.select(conn, _INTENTS, {"ids": ids})}
    return [found[op] for op in ids]


class SqlLeases:
    """Probe scheduling and both leases on a `SqlStore`'s database."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    def claim(self, operation_id: str, holder: str, now: datetime, lease_s: float) -> bool:
        """Lease one operation to `holder` whatever its schedule (an on-demand reconcile)."""
        return self._conditional_set(
            operation_id, now, StateRow.lease_expires_at, StateRow.lease_holder, holder,
            lease_holder=holder, lease_expires_at=now + timedelta(seconds=lease_s))

    def close_rounds(self, holder: str, rounds: Sequence[Round], rule: RoundRule,
                     now: datetime, *, claim: int = 0, lease_s: float = 0.0
                     ) -> tuple[list[Conclusion], list[Intent]]:
        """Conclude `holder`'s `rounds` (`rounds.close_rounds`), then lease up to `claim` due
        operations to it for `lease_s`, oldest probe time first, all in one transaction: a
        sweep's turn costs one commit. The conclusions, and the claimed operations' intents
        (what a probe needs to find them)."""
        with self.store.session() as s:
            concluded = close_rounds(s, self.store, holder, rounds, rule, now)
            return concluded, (_claim_due(s.connection(), holder, now, lease_s, claim)
                               if claim else [])

    def abandon(self, operation_ids: Sequence[str], holder: str, now: datetime) -> None:
        """Count a round for each operation, due again at once if it was due, and release its
        lease, without deciding anything: rounds that could not conclude."""
        with self.store.session() as s:
            s.exec(update(StateRow)
                   .where(col(StateRow.operation_id).in_(operation_ids),
                          col(StateRow.lease_holder) == holder)
                   .values(probe_count=StateRow.probe_count + 1,
                           due_at=case((col(StateRow.due_at).is_(None), None), else_=now),
                           lease_holder=None, lease_expires_at=None))

    def release_all(self, holder: str) -> int:
        """Give up every probe lease `holder` has (graceful shutdown)."""
        with self.store.session() as s:
            result = s.exec(update(StateRow)
                            .where(col(StateRow.lease_holder) == holder)
                            .values(lease_holder=None, lease_expires_at=None))
            return int(result.rowcount)

    def oldest_due(self, now: datetime) -> datetime | None:
        """When the longest-waiting due operation became due (for the reconcile-lag metric)."""
        query = select(func.min(StateRow.due_at)).where(col(StateRow.due_at) <= now)
        with self.store.session() as s:
            return s.exec(query).one()

    def acquire_retry(self, operation_id: str, holder: str, now: datetime,
                      ttl_s: float, attempt: int | None = None, grant: str | None = None
                      ) -> datetime | None:
        """Grant the retry lease to `holder`, for attempt number `attempt`, bound to the token
        hash `grant`; its expiry, or None when another caller holds it. Asking again as the
        same holder renews the same lease (under the new token)."""
        expires = now + timedelta(seconds=ttl_s)
        won: list[bool] = []
        self.store.commit([lambda conn: won.append(
            _take_retry(conn, operation_id, holder, now, expires, attempt, grant))],
            operation_id)
        return expires if won[-1] else None

    def grant_retry(self, operation_id: str, holder: str, rule: Rule, grantable: Grantable,
                    now: datetime, ttl_s: float, grant: str | None = None
                    ) -> tuple[Decided, datetime | None]:
        """Decide, and grant the lease when the decision allows it, in one transaction (shared
        with other writers' commits): the verdict the grant was given on is the one cached
        with it, and the check pays one commit instead of two."""
        expires = now + timedelta(seconds=ttl_s)
        answer: list[tuple[Decided, datetime | None]] = []

        def ask(conn: Connection) -> None:
            decided = decide_in(conn, self.store.deciding, operation_id, rule, now)[0]
            number = grantable(decided.facts, decided.decision)
            won = number is not None and _take_retry(conn, operation_id, holder, now, expires,
                                                     number, grant)
            answer[:] = [(decided, expires if won else None)]

        self.store.commit([ask], operation_id)
        return answer[0]

    def record_granted_attempt(self, attempt: Attempt, holder: str | None, rule: Rule,
                               now: datetime, *, due_at: datetime | None = None,
                               grant: str | None = None) -> tuple[bool, Decided]:
        """The grant checked (or moved on by a report without it), the attempt recorded and
        the decision cached, in one transaction (shared with other writers' commits): one
        commit, and no read transactions before it."""
        return self.store.record_attempt_and_decide(
            attempt, rule, now, due_at=due_at,
            guard=lambda conn: _granted(conn, self.store.deciding, attempt, holder, grant,
                                        rule, now))

    def retry_grant(self, operation_id: str, now: datetime) -> tuple[str, int | None] | None:
        """The holder of the operation's unexpired retry lease and the attempt it allows."""
        with self.store.reading() as conn:
            lease = _lease_of(conn, operation_id, now)
            return None if lease is None else (lease.holder, lease.attempt)

    def retry_lease(self, operation_id: str, now: datetime) -> Lease | None:
        """The operation's unexpired retry lease, with its token's hash."""
        with self.store.reading() as conn:
            return _lease_of(conn, operation_id, now)

    def _conditional_set(self, operation_id: str, now: datetime, expires: Any,
                         holder_column: Any, holder: str, **values: object) -> bool:
        condition = or_(_free(expires, now), col(holder_column) == holder)
        with self.store.session() as s:
            result = s.exec(update(StateRow)
                            .where(col(StateRow.operation_id) == operation_id, condition)
                            .values(**values))
            return int(result.rowcount) == 1
