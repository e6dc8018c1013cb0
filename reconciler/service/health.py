"""Liveness, readiness and the Prometheus exposition."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from reconciler.core.errors import StoreUnavailableError
from reconciler.infra.metrics import RECONCILE_LAG
from reconciler.service.metering import measure_waiting, reconcile_lag_s
from reconciler.service.problems import STORE_UNAVAILABLE, ProblemError, problem_responses
from reconciler.service.wiring import Wired
from reconciler.store.kinds import journal_of, kind_of

log = logging.getLogger(__name__)

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """Liveness: the process serves. Open without a token."""
    return {"status": "ok"}


@router.get("/readyz", responses=problem_responses(503))
def readyz(wiring: Wired) -> dict[str, str]:
    """Readiness: the receipt store answers a query on its own tables (an empty or foreign
    database where the store should be is not ready: every write would fail), and commits a
    write (a full disk or a read-only database answers reads while refusing every intent)."""
    try:
        wiring.store.ready()
    except StoreUnavailableError as exc:
        log.warning("not ready: %s", exc)
        raise ProblemError(STORE_UNAVAILABLE, "the receipt store does not answer") from None
    try:
        kind_of(wiring.ledger.store).trial_write(wiring.ledger.store)
    except (StoreUnavailableError, SQLAlchemyError) as exc:
        log.warning("not ready: the receipt store refuses a write: %s", exc)
        raise ProblemError(STORE_UNAVAILABLE, (
            "the receipt store answers reads but refuses writes (disk full? read-only?): "
            "every intent would be refused; the sidecar's log has the store's error")) from None
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
        measure_waiting(wiring.store, journal_of(wiring.store), now)
    except StoreUnavailableError as exc:
        # A scrape while the store is down still shows everything else; the gauges stay stale.
        log.warning("store gauges not measured: %s", exc)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
