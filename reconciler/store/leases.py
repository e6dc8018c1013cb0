"""Leases and the probe schedule, in the operation_state table.

Two kinds of lease, both a holder and an expiry on the operation's state row:

- the *probe lease*: one sweeper (thread or process) probes an operation at a time;
- the *retry lease*: one caller holds the grant to retry an operation.

    claim ───────────────── lease_expires_at ──────────────▶
      │ holder probes, records evidence │ a crashed holder's lease lapses here;
      │ then `finish` releases early    │ any sweeper may claim the operation again

Every claim is a single conditional UPDATE (or SELECT ... FOR UPDATE SKIP LOCKED on PostgreSQL),
so two replicas sharing one database never both win.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, exists, func, or_, update
from sqlmodel import col, select

from reconciler.domain import Verdict
from reconciler.store.sql import SqlStore
from reconciler.store.tables import AttemptRow, StateRow

INDETERMINATE = Verdict.INDETERMINATE.value


def _free(expires: Any, now: datetime) -> ColumnElement[bool]:
    return or_(col(expires).is_(None), col(expires) < now)


def _due(now: datetime) -> list[ColumnElement[bool]]:
    """Indeterminate, not escalated, dispatched at least once, its probe time come."""
    return [
        col(StateRow.verdict) == INDETERMINATE,
        col(StateRow.escalated).is_(False),
        or_(col(StateRow.next_probe_at).is_(None), col(StateRow.next_probe_at) <= now),
        exists().where(col(AttemptRow.operation_id) == col(StateRow.operation_id)),
    ]


class SqlLeases:
    """Probe scheduling and both leases on a `SqlStore`'s database."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    def claim_due(self, holder: str, now: datetime, lease_s: float, limit: int) -> list[str]:
        """Lease up to `limit` due operations to `holder`, oldest probe time first."""
        query = (select(StateRow.operation_id)
                 .where(*_due(now), _free(StateRow.lease_expires_at, now))
                 .order_by(col(StateRow.next_probe_at).asc().nulls_first())
                 .limit(limit)
                 .with_for_update(skip_locked=True))
        with self.store.session() as s:
            ids = list(s.exec(query).all())
            if ids:
                s.exec(update(StateRow)
                       .where(col(StateRow.operation_id).in_(ids))
                       .values(lease_holder=holder,
                               lease_expires_at=now + timedelta(seconds=lease_s)))
            return ids

    def claim(self, operation_id: str, holder: str, now: datetime, lease_s: float) -> bool:
        """Lease one operation to `holder` whatever its schedule (an on-demand reconcile)."""
        return self._conditional_set(
            operation_id, now, StateRow.lease_expires_at, StateRow.lease_holder, holder,
            lease_holder=holder, lease_expires_at=now + timedelta(seconds=lease_s))

    def finish(self, operation_id: str, holder: str, *, next_probe_at: datetime | None,
               escalate: bool) -> None:
        """Count a probe round, schedule the next one (or escalate), and release the lease."""
        with self.store.session() as s:
            s.exec(update(StateRow)
                   .where(col(StateRow.operation_id) == operation_id,
                          col(StateRow.lease_holder) == holder)
                   .values(probe_count=StateRow.probe_count + 1, next_probe_at=next_probe_at,
                           escalated=StateRow.escalated | escalate, lease_holder=None,
                           lease_expires_at=None))

    def release_all(self, holder: str) -> int:
        """Give up every probe lease `holder` has (graceful shutdown)."""
        with self.store.session() as s:
            result = s.exec(update(StateRow)
                            .where(col(StateRow.lease_holder) == holder)
                            .values(lease_holder=None, lease_expires_at=None))
            return int(result.rowcount)

    def probe_count(self, operation_id: str) -> int:
        with self.store.session() as s:
            state = s.get(StateRow, operation_id)
            return state.probe_count if state else 0

    def oldest_due(self, now: datetime) -> datetime | None:
        """When the longest-waiting due operation became due (for the reconcile-lag metric)."""
        became_due = func.coalesce(StateRow.next_probe_at, StateRow.updated_at)
        query = select(func.min(became_due)).where(*_due(now))
        with self.store.session() as s:
            return s.exec(query).one()

    def acquire_retry(self, operation_id: str, holder: str, now: datetime,
                      ttl_s: float) -> datetime | None:
        """Grant the retry lease to `holder`; its expiry, or None when another caller holds it.
        Asking again as the same holder renews the same lease."""
        expires = now + timedelta(seconds=ttl_s)
        won = self._conditional_set(
            operation_id, now, StateRow.retry_lease_expires_at, StateRow.retry_holder, holder,
            retry_holder=holder, retry_lease_expires_at=expires)
        return expires if won else None

    def _conditional_set(self, operation_id: str, now: datetime, expires: Any,
                         holder_column: Any, holder: str, **values: object) -> bool:
        condition = or_(_free(expires, now), col(holder_column) == holder)
        with self.store.session() as s:
            result = s.exec(update(StateRow)
                            .where(col(StateRow.operation_id) == operation_id, condition)
                            .values(**values))
            return int(result.rowcount) == 1
