"""`SqlJournal`: agent runs' event logs in the receipt store's database.

Appends are optimistic. A writer appends on top of the run as it last read it (`view.seq`);
if another writer got there first, the unique (run_id, seq) or the summary's seq check fails,
nothing is written, and the caller gets RunConflictError: reload and decide again. That is
what keeps two workers resuming one run from both dispatching its next tool call:

    worker A: load (seq 7) ── append tool_dispatched as 8 ✓ ── send
    worker B: load (seq 7) ────── append tool_dispatched as 8 ✗ conflict ── reload, see A's
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, exists, false, func, or_, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from reconciler.core.domain import Verdict
from reconciler.core.errors import RunConflictError, UnknownRunError
from reconciler.core.ports import RunSummary
from reconciler.core.runs.events import EventKind, RunEvent, RunView, apply, project
from reconciler.core.runs.states import WORKABLE
from reconciler.store.sealing import Sealer
from reconciler.store.sql import SqlStore
from reconciler.store.tables import IntentRow, RunEventRow, RunRow, StateRow, ToolResultRow

#: A run is unhealthy when one of its calls was reported a success the provider does not show
#: (SPEC 4, false_success: "mark the run unhealthy"). Intents name their run (ix_intents_run_
#: tool_call leads with run_id), so this is an index lookup per listed run.
_UNHEALTHY = exists().where(
    col(IntentRow.run_id) == col(RunRow.run_id),
    col(StateRow.operation_id) == col(IntentRow.operation_id),
    col(StateRow.verdict) == Verdict.FALSE_SUCCESS.value)

_WORKABLE = sorted(state.value for state in WORKABLE)


def _unattended(now: datetime, idle_before: datetime) -> tuple[ColumnElement[bool], ...]:
    """A live run no worker advances and no client must continue: its lease lapsed, or nobody
    has held it since `idle_before`. Led by ix_runs_needing_work (migration 0008)."""
    return (col(RunRow.state).in_(_WORKABLE), col(RunRow.paused) == false(),
            or_(col(RunRow.lease_expires_at) <= now,
                and_(col(RunRow.lease_expires_at).is_(None),
                     col(RunRow.updated_at) <= idle_before)))


class SqlJournal:
    """Run event logs on the same engine (and transactions) as the receipt store, their
    payloads sealed (`sealing`); the sealer defaults to the key in RECONCILER_RUN_KEY, read
    when a payload is first sealed or opened (listing runs needs no key)."""

    def __init__(self, store: SqlStore, sealer: Sealer | None = None) -> None:
        self.store = store
        self._sealer = sealer

    @property
    def sealer(self) -> Sealer:
        if self._sealer is None:
            self._sealer = Sealer.from_env()
        return self._sealer

    def create(self, run_id: str, data: Mapping[str, Any], at: datetime) -> RunView:
        """Record a new run (its `run_created` event); RunConflictError if the id is taken."""
        event = RunEvent(run_id, 1, EventKind.CREATED, at, dict(data))
        view = apply(None, event)
        try:
            with self.store.session() as s:
                s.add(_summary(RunRow(run_id=run_id, state="", seq=0, created_at=at,
                                      updated_at=at), view))
                s.flush()
                s.add(self._event_row(event))
        except IntegrityError:
            raise RunConflictError(run_id, "a run with this id exists already") from None
        return view

    def append(self, view: RunView, kind: EventKind, data: Mapping[str, Any],
               at: datetime) -> RunView:
        """Append one event on top of `view`; raises (writing nothing) when the event is not
        legal for the run, or when the run moved on since `view` was read."""
        event = RunEvent(view.run_id, view.seq + 1, kind, at, dict(data))
        new = apply(view, event)
        try:
            with self.store.session() as s:
                moved = s.execute(update(RunRow).where(
                    col(RunRow.run_id) == view.run_id, col(RunRow.seq) == view.seq,
                ).values(**_summary_values(new)))
                if moved.rowcount != 1:  # type: ignore[attr-defined]
                    raise RunConflictError(view.run_id, f"the run moved past seq {view.seq}; "
                                                        "reload it and decide again")
                s.add(self._event_row(event))
                if kind is EventKind.TOOL_RESULT:
                    s.add(ToolResultRow(run_id=view.run_id, turn=int(data["turn"]),
                                        tool_call_id=str(data["tool_call_id"]),
                                        is_error=bool(data.get("is_error", False)),
                                        source=str(data.get("source", "handler")), at=at))
                s.flush()
        except IntegrityError:
            raise RunConflictError(view.run_id, "another writer recorded this event first; "
                                                "reload the run") from None
        return new

    def claim(self, run_id: str, holder: str, now: datetime, ttl_s: float, *,
              force: bool = False) -> bool:
        """Take (or renew) the run's lease; False while another worker's lease runs. `force`
        takes it anyway: only for a supervisor that knows the holder is dead.

            A claims ──── A's lease ────┤ expires: B may claim
            B claims ✗ (A holds it)          B claims ✓
        """
        expires = now + timedelta(seconds=ttl_s)
        query = update(RunRow).where(col(RunRow.run_id) == run_id)
        if not force:
            query = query.where(or_(col(RunRow.holder).is_(None), col(RunRow.holder) == holder,
                                    col(RunRow.lease_expires_at) <= now))
        with self.store.session() as s:
            claimed = s.execute(query.values(holder=holder, lease_expires_at=expires))
            if claimed.rowcount == 1:  # type: ignore[attr-defined]
                return True
            if s.get(RunRow, run_id) is None:
                raise UnknownRunError(run_id)
        return False

    def claim_unattended(self, run_id: str, holder: str, now: datetime, ttl_s: float,
                         idle_before: datetime) -> bool:
        """Take the run's lease only if the run still needs a worker (`needing_work`), in one
        conditional UPDATE: of two supervisors that both found it, one wins."""
        expires = now + timedelta(seconds=ttl_s)
        with self.store.session() as s:
            claimed = s.execute(update(RunRow).where(
                col(RunRow.run_id) == run_id, *_unattended(now, idle_before),
            ).values(holder=holder, lease_expires_at=expires))
            return bool(claimed.rowcount == 1)  # type: ignore[attr-defined]

    def needing_work(self, now: datetime, idle_before: datetime, limit: int) -> list[str]:
        """Live runs (queued, running, awaiting a tool) that no worker advances and no client
        must continue: those whose lease lapsed (their worker died) and those nobody has held
        since `idle_before` (queued and never started, or left by a worker that stopped
        without finishing); longest waiting first, at most `limit`. Two index range scans."""
        live, unpaused, _ = _unattended(now, idle_before)
        lapsed = (select(RunRow.run_id, RunRow.lease_expires_at)
                  .where(live, unpaused, col(RunRow.lease_expires_at) <= now)
                  .order_by(col(RunRow.lease_expires_at)).limit(limit))
        unheld = (select(RunRow.run_id, RunRow.updated_at)
                  .where(live, unpaused, col(RunRow.lease_expires_at).is_(None),
                         col(RunRow.updated_at) <= idle_before)
                  .order_by(col(RunRow.updated_at)).limit(limit))
        with self.store.session() as s:
            found = [*s.exec(lapsed).all(), *s.exec(unheld).all()]
        return [run_id for run_id, _ in sorted(found, key=lambda row: row[1])[:limit]]

    def release(self, run_id: str, holder: str) -> None:
        with self.store.session() as s:
            s.execute(update(RunRow).where(col(RunRow.run_id) == run_id,
                                           col(RunRow.holder) == holder)
                      .values(holder=None, lease_expires_at=None))

    def list_runs(self, *, state: str | None = None, correlation_id: str | None = None,
                  unhealthy: bool | None = None, after: str | None = None,
                  limit: int = 50) -> list[RunSummary]:
        """Runs in id order from the summary table, `limit` at a time, after the `after`
        cursor; each filter leads an index ending in the id (migration 0007)."""
        flagged = _UNHEALTHY.label("unhealthy")
        query = select(RunRow, flagged)
        if state is not None:
            query = query.where(col(RunRow.state) == state)
        if correlation_id is not None:
            query = query.where(col(RunRow.correlation_id) == correlation_id)
        if unhealthy is not None:
            query = query.where(_UNHEALTHY if unhealthy else ~_UNHEALTHY)
        if after is not None:
            query = query.where(col(RunRow.run_id) > after)
        query = query.order_by(col(RunRow.run_id)).limit(limit)
        with self.store.session() as s:
            return [RunSummary(r.run_id, r.state, r.turn, r.correlation_id, r.stop_reason,
                               r.error_code, bool(bad), r.created_at, r.updated_at)
                    for r, bad in s.exec(query).all()]

    def count_runs(self) -> list[tuple[str, int, datetime]]:
        query = (select(RunRow.state, func.count(), func.min(RunRow.updated_at))
                 .group_by(col(RunRow.state)).order_by(col(RunRow.state)))
        with self.store.session() as s:
            return [(state, n, oldest) for state, n, oldest in s.exec(query).all()]

    def _event_row(self, event: RunEvent) -> RunEventRow:
        data = json.dumps(event.data, separators=(",", ":"), sort_keys=True)
        return RunEventRow(run_id=event.run_id, seq=event.seq, kind=event.kind.value,
                           at=event.at, data=self.sealer.seal(data.encode()))

    def load(self, run_id: str) -> RunView:
        """The run, rebuilt from its events."""
        return project(self.events(run_id))

    def events(self, run_id: str, after: int = 0) -> list[RunEvent]:
        with self.store.session() as s:
            rows = s.exec(select(RunEventRow).where(
                RunEventRow.run_id == run_id, col(RunEventRow.seq) > after,
            ).order_by(col(RunEventRow.seq))).all()
        if not rows and after == 0:
            raise UnknownRunError(run_id)
        return [RunEvent(r.run_id, r.seq, EventKind(r.kind), r.at,
                         json.loads(self.sealer.open(r.data))) for r in rows]


def _summary_values(view: RunView) -> dict[str, Any]:
    usage = view.usage
    return {
        "state": view.state.value, "seq": view.seq, "turn": view.turn,
        "correlation_id": view.correlation_id, "stop_reason": view.stop_reason,
        "error_code": (view.error or {}).get("error_code"),
        "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "updated_at": view.updated_at, "paused": view.continue_request is not None,
    }


def _summary(row: RunRow, view: RunView) -> RunRow:
    for name, value in _summary_values(view).items():
        setattr(row, name, value)
    return row
