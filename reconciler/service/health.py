"""Liveness, readiness and the Prometheus exposition."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from reconciler.errors import StoreUnavailableError
from reconciler.metrics import RECONCILE_LAG
from reconciler.ports import Journal, Store
from reconciler.service.metering import measure_waiting, reconcile_lag_s
from reconciler.service.problems import STORE_UNAVAILABLE, ProblemError, problem_responses
from reconciler.service.wiring import Wired
from reconciler.store.schema import journal_of

log = logging.getLogger(__name__)

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """Liveness: the process serves. Open without a token."""
    return {"status": "ok"}


@router.get("/readyz", responses=problem_responses(503))
def readyz(wiring: Wired) -> dict[str, str]:
    """Readiness: the receipt store answers a query on its own tables (an empty or foreign
    database where the store should be is not ready: every write would fail)."""
    try:
        wiring.store.ready()
    except StoreUnavailableError as exc:
        log.warning("not ready: %s", exc)
        raise ProblemError(STORE_UNAVAILABLE, "the receipt store does not answer") from None
    return {"status": "ready"}


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST.partition(";")[0]: {}},
                             "description": "Prometheus text exposition"}})
def metrics(wiring: Wired) -> Response:
    """Prometheus metrics. The reconcile lag, what waits on a human and the runs by state are
    measured at each scrape."""
    now = wiring.ledger.clock()
    try:
        RECONCILE_LAG.set(reconcile_lag_s(wiring.leases, now))
        measure_waiting(wiring.store, _journal(wiring.store), now)
    except StoreUnavailableError as exc:
        # A scrape while the store is down still shows everything else; the gauges stay stale.
        log.warning("store gauges not measured: %s", exc)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def _journal(store: Store) -> Journal | None:
    """The runs beside the store; none beside the in-memory twin (it keeps no runs)."""
    try:
        return journal_of(store)
    except TypeError:
        return None
