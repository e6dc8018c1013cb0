"""The service's moving parts, wired once per app: ledger, leases, retry gate, sweeper, and the
periodic sweep that runs for as long as the app does."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, TypeVar, TypeVarTuple

import anyio.to_thread
from apscheduler.schedulers.background import BackgroundScheduler
from fastapi import Depends, FastAPI, Request
from sqlalchemy.exc import SQLAlchemyError

from probes.base import Probe
from reconciler.core.errors import StoreUnavailableError
from reconciler.core.ports import Leases, Store
from reconciler.core.schedule import SweepPolicy
from reconciler.core.schemas import OperationOut
from reconciler.infra import tracing
from reconciler.infra.metrics import VERDICTS
from reconciler.ledger import Judgement, Ledger
from reconciler.ledger.gate import RetryGate
from reconciler.ledger.prune import Retention
from reconciler.ledger.sweep import ProbeLookup, Sweeper, sweep_periodically
from reconciler.runtime.supervisor import Supervisor
from reconciler.service.loop_calls import call_in_greenlet
from reconciler.service.metering import timed_calls
from reconciler.service.providers import ProviderNames
from reconciler.service.settings import Settings, load_providers
from reconciler.service.views import operation_out
from reconciler.store.kinds import kind_of, leases_of
from reconciler.store.schema import open_store

log = logging.getLogger(__name__)

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: How often the retention pass runs when `retain_settled_days` is set (each pass is bounded:
#: prune.Retention's batches), the first time at start.
RETENTION_EVERY_S = 60.0


def configured_probes(settings: Settings, store: Store) -> tuple[ProbeLookup, ProviderNames]:
    """The providers of the configuration file: their contracts go to the store, their probes
    to the sweeper, their names to the check of new intents. Without a file no operation has
    probes: verdicts come from evidence posted to the service (receipts, webhooks,
    observations), and deadlines escalate the rest."""
    providers = load_providers(settings.config) if settings.config else {}
    for setup in providers.values():
        store.put_contract(setup.contract)
    names = ProviderNames(frozenset(providers) if settings.config else None)
    names.warn_undecided(store)

    def probes_for(provider: str) -> Sequence[Probe]:
        setup = providers.get(provider)
        return setup.probes if setup else ()

    return probes_for, names


@dataclass(frozen=True, slots=True)
class Wiring:
    settings: Settings
    ledger: Ledger
    store: Store
    leases: Leases
    gate: RetryGate
    sweeper: Sweeper
    providers: ProviderNames = field(default_factory=lambda: ProviderNames(None))
    retention: Retention | None = None
    #: The ledger's calls run on the event loop (`call`): a SQLite store.
    on_loop: bool = False

    def operation_out(self, judgement: Judgement) -> OperationOut:
        """An operation as a client gets it."""
        return operation_out(judgement, judgement.escalated)

    async def call(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        """`fn(*args)`, a synchronous call into the ledger, for an `async def` route: the one
        seam between the routes and the synchronous store, in one of two ways.

        On SQLite (`on_loop`) in a greenlet on the event loop (as SQLAlchemy's asyncio
        extension runs sync code, sqlalchemy/util/concurrency.py, with the greenlet reused:
        service.loop_calls): no thread hop. Its reads are a local file's, short, and begun
        deferred (schema.make_engine), so under WAL they wait on no writer; its writes go to
        the group committer, which queues them for a thread to commit and switches back to
        the loop until they are (store.commits). Nothing on this path takes the write lock on
        the loop.

        On any other store on anyio's worker threads, as FastAPI runs a plain `def` route
        (fastapi/routing.py, run_endpoint_function): a PostgreSQL read is a network round trip
        that would hold the loop for its whole length, and a store kept elsewhere (in memory,
        a test's) is not known to be as quick.
        """
        if self.on_loop:
            return await call_in_greenlet(fn, *args)
        return await anyio.to_thread.run_sync(fn, *args)


def count_transition(judgement: Judgement) -> None:
    """reconciler_verdicts_total counts verdicts entered, never verdicts read; each is also a
    span in the trace of the call that caused it (when tracing is configured)."""
    VERDICTS.labels(verdict=judgement.decision.verdict.value).inc()
    tracing.verdict_changed(judgement)


def build_wiring(settings: Settings, ledger: Ledger | None,
                 probes_for: ProbeLookup | None) -> Wiring:
    ledger = ledger or Ledger(open_store(settings.db, pool_size=settings.db_pool_size,
                                          warm=True))
    # Every door a verdict changes by (routes, the gate, the sweep, agent runs) is the ledger's.
    ledger.on_transition = ledger.on_transition or count_transition
    store = timed_calls(ledger.store, Store)
    leases = timed_calls(leases_of(store), Leases)
    policy = SweepPolicy(concurrency=settings.probe_concurrency,
                         probe_timeout_s=settings.probe_timeout_s,
                         probe_budget=settings.probe_budget)
    names = ProviderNames(None)
    if probes_for is None:
        probes_for, names = configured_probes(settings, store)
    sweeper = Sweeper(ledger, leases, probes_for, policy)
    days = settings.retain_settled_days
    retention = None if days is None else Retention(ledger, timedelta(days=days))
    on_loop = kind_of(ledger.store).on_event_loop(ledger.store)
    return Wiring(settings, ledger, store, leases,
                  RetryGate(ledger, leases, settings.retry_lease_ttl_s), sweeper, names,
                  retention, on_loop)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Sweep, and supervise runs (with an agent), while serving. At shutdown (after uvicorn has
    finished the requests in flight) stop the supervisor (its runs get `shutdown_timeout_s` to
    come to rest, then give up their leases), wait for a running sweep, then give up this
    sweeper's probe leases so another replica can take its operations at once instead of when
    the leases expire."""
    wiring: Wiring = app.state.wiring
    interval = wiring.settings.sweep_interval_s
    scheduler = sweep_periodically(wiring.sweeper, interval) if interval > 0 else None
    supervisor: Supervisor | None = getattr(app.state, "supervisor", None)
    if supervisor is not None:
        supervisor.start()
    if wiring.retention is not None:
        scheduler = scheduler or _started()
        scheduler.add_job(wiring.retention.run, "interval", seconds=RETENTION_EVERY_S,
                          id="retention", max_instances=1, coalesce=True,
                          next_run_time=datetime.now(UTC))
    try:
        yield
    finally:
        if supervisor is not None:
            await supervisor.stop(wiring.settings.shutdown_timeout_s)
        if scheduler is not None:
            await asyncio.to_thread(scheduler.shutdown, wait=True)
        try:
            await asyncio.to_thread(wiring.sweeper.close)
        except (StoreUnavailableError, SQLAlchemyError) as exc:
            # A store that is down, or up but refusing writes (a read-only PostgreSQL replica,
            # a full disk): the leases are not released, nothing else is lost, and shutting
            # down must go on (uvicorn would log "Application shutdown failed" and a traceback).
            log.warning("sweeper %s could not release its probe leases (another replica takes "
                        "their operations when they expire): %s", wiring.sweeper.holder,
                        _cause(exc))


def _cause(exc: Exception) -> object:
    """What the store said (the driver's error), not SQLAlchemy's text with the statement."""
    return getattr(exc, "orig", None) or exc


def _started() -> BackgroundScheduler:
    scheduler = BackgroundScheduler(timezone="UTC")
    scheduler.start()
    return scheduler


async def get_wiring(request: Request) -> Wiring:
    # A coroutine so that FastAPI does not hop to its thread pool to run it (auth._requiring).
    runtime: Wiring = request.app.state.wiring
    return runtime


Wired = Annotated[Wiring, Depends(get_wiring)]
