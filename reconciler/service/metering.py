"""Store latency, reconcile lag, agent runs' steps and what waits on a human: the metrics the
service measures itself. (Probe calls and escalations are counted where they happen, in
reconciler.ledger.sweep; verdict transitions where the ledger reports them, service.wiring.)

Wrapping the store's and the leases' methods in one place times every call, whoever makes it
(routes, the retry gate, the sweeper), without touching their code.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from reconciler.core.attention import Reason
from reconciler.core.ports import Journal, Leases, Store
from reconciler.core.runs.events import EventKind
from reconciler.core.runs.states import RunState
from reconciler.infra.metrics import (
    RUN_BUDGET_STOPS,
    RUN_TOOL_CALLS,
    RUN_TURNS,
    RUNS,
    STORE_DURATION,
    WAITING,
    WAITING_AGE,
)

T = TypeVar("T")


def timed_calls(target: T, port: type) -> T:
    """`target` with each method of `port` (the protocol it serves: ports.Store,
    ports.Leases) timed into reconciler_store_duration_seconds. Idempotent: a method that is
    already timed is left as it is.

    Only the port's methods: the building blocks they are made of (SqlStore's `commit`,
    `reading`, `contract_in`) are called inside them, so timing those too counted every write
    twice under two names, timed only the making of `reading`'s context manager, and cost
    each intent, attempt and retry check one or two timed calls more (1.0-1.8 us of CPU
    each, warm)."""
    for name in dir(port):
        if name.startswith("_") or not callable(getattr(port, name)):
            continue
        method = getattr(target, name)
        if not hasattr(method, "__wrapped__"):
            setattr(target, name, _timed(name, method))
    return target


def _timed(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    histogram = STORE_DURATION.labels(method=name)

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            histogram.observe(time.perf_counter() - started)

    return call


def reconcile_lag_s(leases: Leases, now: datetime) -> float:
    """Seconds the longest-waiting due operation has waited (0 when none is due)."""
    oldest = leases.oldest_due(now)
    if oldest is None:
        return 0.0
    return max(0.0, (now - oldest).total_seconds())


def counted_events(journal: Journal) -> Journal:
    """`journal` with the run steps it records counted: turns, tool dispatches, budget stops.
    Counted once the event is appended (a conflicting append records nothing, counts nothing).
    Idempotent: a memory store's journal is one object however many apps serve the store
    (store.kinds), and its appends are counted once."""
    append = journal.append
    if hasattr(append, "__wrapped__"):
        return journal

    @functools.wraps(append)
    def counted(*args: Any, **kwargs: Any) -> Any:
        view = append(*args, **kwargs)
        kind = args[1] if len(args) > 1 else kwargs["kind"]
        data = args[2] if len(args) > 2 else kwargs["data"]
        if kind is EventKind.TURN:
            RUN_TURNS.inc()
        elif kind is EventKind.TOOL_DISPATCHED:
            RUN_TOOL_CALLS.inc()
        elif kind is EventKind.FAILED and data.get("error_code") == "budget_exceeded":
            RUN_BUDGET_STOPS.inc()
        return view

    setattr(journal, "append", counted)  # noqa: B010 - an instance attribute, as timed_calls
    return journal


def measure_waiting(store: Store, journal: Journal, now: datetime) -> None:
    """Set the human-queue and runs-by-state gauges from the store (at each scrape). A reason
    or state with nothing in it reads 0, not its last value."""
    for reason in Reason:
        WAITING.labels("operation", reason.value).set(0)
        WAITING_AGE.labels("operation", reason.value).set(0)
    for waiting in store.waiting_on_human():
        WAITING.labels("operation", waiting.reason).set(waiting.count)
        WAITING_AGE.labels("operation", waiting.reason).set(_age(now, waiting.oldest))
    by_state = {state: (n, oldest) for state, n, oldest in journal.count_runs()}
    for state in RunState:
        RUNS.labels(state.value).set(by_state.get(state.value, (0, now))[0])
    n, oldest = by_state.get(RunState.AWAITING_APPROVAL.value, (0, now))
    WAITING.labels("run", RunState.AWAITING_APPROVAL.value).set(n)
    WAITING_AGE.labels("run", RunState.AWAITING_APPROVAL.value).set(_age(now, oldest))


def _age(now: datetime, since: datetime) -> float:
    return max(0.0, (now - since).total_seconds())
