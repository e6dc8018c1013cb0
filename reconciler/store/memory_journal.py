"""`MemoryJournal`: agent runs' event logs in a process's memory.

The in-memory twin of `SqlJournal` (store/journal.py), held to the same behaviour by the
journal's contract suite (tests/test_journal_contract.py), so the runtime's unit tests and a
sidecar on `MemoryStore` need no database. Thread-safe: one lock, held for each call as a
transaction would be. Appends are optimistic as in the database: one on top of a view whose
`seq` is no longer the run's writes nothing and raises RunConflictError.

Events keep their payloads as JSON text, as the database keeps them (unsealed: nothing here
outlives the process): what a reader gets back is what a reader of the database would get
(tuples come back as lists), never the caller's own mutable dict.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from reconciler.core.domain import Verdict
from reconciler.core.errors import RunConflictError, UnknownRunError
from reconciler.core.ports import RunSummary, Store
from reconciler.core.runs.events import EventKind, RunEvent, RunView, apply, project
from reconciler.core.runs.states import WORKABLE


@dataclass(slots=True)
class _Run:
    """A run's events (payloads as JSON text) and what the database's summary row holds."""

    view: RunView
    events: list[tuple[EventKind, datetime, str]] = field(default_factory=list)
    holder: str | None = None
    lease_expires_at: datetime | None = None

    def unattended(self, now: datetime, idle_before: datetime) -> bool:
        """Live, not paused for its client, and its lease lapsed or nobody held it since
        `idle_before` (SqlJournal's `_unattended`)."""
        if self.view.state not in WORKABLE or self.view.continue_request is not None:
            return False
        if self.lease_expires_at is None:
            return self.view.updated_at <= idle_before
        return self.lease_expires_at <= now


class MemoryJournal:
    """A `Journal` in memory. `store`: the receipt store whose operations say whether a run is
    unhealthy (one of its calls a false_success); without one, no run is."""

    def __init__(self, store: Store | None = None) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}

    def create(self, run_id: str, data: Mapping[str, Any], at: datetime) -> RunView:
        event = RunEvent(run_id, 1, EventKind.CREATED, at, dict(data))
        view = apply(None, event)
        text = _encoded(event.data)
        with self._lock:
            if run_id in self._runs:
                raise RunConflictError(run_id, "a run with this id exists already")
            self._runs[run_id] = _Run(view, [(event.kind, at, text)])
        return view

    def append(self, view: RunView, kind: EventKind, data: Mapping[str, Any],
               at: datetime) -> RunView:
        event = RunEvent(view.run_id, view.seq + 1, kind, at, dict(data))
        new = apply(view, event)
        text = _encoded(event.data)
        with self._lock:
            run = self._runs.get(view.run_id)
            if run is None or run.view.seq != view.seq:
                raise RunConflictError(view.run_id, f"the run moved past seq {view.seq}; "
                                                    "reload it and decide again")
            run.events.append((kind, at, text))
            run.view = new
        return new

    def load(self, run_id: str) -> RunView:
        return project(self.events(run_id))

    def events(self, run_id: str, after: int = 0) -> list[RunEvent]:
        with self._lock:
            run = self._runs.get(run_id)
            kept = [] if run is None else run.events[after:]
        if not kept and after == 0:
            raise UnknownRunError(run_id)
        return [RunEvent(run_id, seq, kind, at, json.loads(text))
                for seq, (kind, at, text) in enumerate(kept, start=after + 1)]

    def claim(self, run_id: str, holder: str, now: datetime, ttl_s: float, *,
              force: bool = False) -> bool:
        with self._lock:
            run = self._require(run_id)
            if not (force or run.holder in (None, holder)
                    or (run.lease_expires_at is not None and run.lease_expires_at <= now)):
                return False
            run.holder, run.lease_expires_at = holder, now + timedelta(seconds=ttl_s)
            return True

    def claim_unattended(self, run_id: str, holder: str, now: datetime, ttl_s: float,
                         idle_before: datetime) -> bool:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or not run.unattended(now, idle_before):
                return False
            run.holder, run.lease_expires_at = holder, now + timedelta(seconds=ttl_s)
            return True

    def needing_work(self, now: datetime, idle_before: datetime, limit: int) -> list[str]:
        with self._lock:
            waiting = [(run.lease_expires_at or run.view.updated_at, run_id)
                       for run_id, run in self._runs.items()
                       if run.unattended(now, idle_before)]
        return [run_id for _, run_id in sorted(waiting)[:limit]]

    def release(self, run_id: str, holder: str) -> None:
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None and run.holder == holder:
                run.holder = run.lease_expires_at = None

    def list_runs(self, *, state: str | None = None, correlation_id: str | None = None,
                  unhealthy: bool | None = None, after: str | None = None,
                  limit: int = 50) -> list[RunSummary]:
        with self._lock:
            views = sorted((run.view for run_id, run in self._runs.items()
                            if (after is None or run_id > after)
                            and (state is None or run.view.state.value == state)
                            and (correlation_id is None
                                 or run.view.correlation_id == correlation_id)),
                           key=lambda view: view.run_id)
        page: list[RunSummary] = []
        for view in views:
            if len(page) == limit:
                break
            flagged = self._unhealthy(view.run_id)
            if unhealthy is None or flagged == unhealthy:
                page.append(RunSummary(view.run_id, view.state.value, view.turn,
                                       view.correlation_id, view.stop_reason,
                                       (view.error or {}).get("error_code"), flagged,
                                       view.created_at, view.updated_at))
        return page

    def count_runs(self) -> list[tuple[str, int, datetime]]:
        by_state: dict[str, list[datetime]] = {}
        with self._lock:
            for run in self._runs.values():
                by_state.setdefault(run.view.state.value, []).append(run.view.updated_at)
        return [(state, len(times), min(times)) for state, times in sorted(by_state.items())]

    def _unhealthy(self, run_id: str) -> bool:
        """SPEC 4, false_success: "mark the run unhealthy"; read from the store's operations
        (outside the journal's lock: the store has its own)."""
        return self.store is not None and bool(self.store.list_operations(
            verdict=Verdict.FALSE_SUCCESS.value, run_id=run_id, limit=1))

    def _require(self, run_id: str) -> _Run:
        run = self._runs.get(run_id)
        if run is None:
            raise UnknownRunError(run_id)
        return run


#: The journal beside each memory store (`journal_beside`): the runs live as long as it does.
_BESIDE: weakref.WeakKeyDictionary[Store, MemoryJournal] = weakref.WeakKeyDictionary()
_BESIDE_LOCK = threading.Lock()


def journal_beside(store: Store) -> MemoryJournal:
    """The one journal kept beside `store`: every caller that asks for the runs of one memory
    store (each request of a sidecar on it) gets the same runs."""
    with _BESIDE_LOCK:
        journal = _BESIDE.get(store)
        if journal is None:
            journal = _BESIDE[store] = MemoryJournal(store)
        return journal


def _encoded(data: Mapping[str, Any]) -> str:
    """The payload as the database keeps it (a TypeError, nothing written, when it is not
    JSON)."""
    return json.dumps(data, separators=(",", ":"), sort_keys=True)
