"""Liveness, readiness and the Prometheus exposition."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from reconciler.errors import StoreUnavailableError
from reconciler.metrics import RECONCILE_LAG
from reconciler.service.metering import reconcile_lag_s
from reconciler.service.problems import STORE_UNAVAILABLE, ProblemError, problem_responses
from reconciler.service.wiring import Wired

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
    """Prometheus metrics. The reconcile lag is measured at each scrape."""
    try:
        RECONCILE_LAG.set(reconcile_lag_s(wiring.leases, wiring.ledger.clock()))
    except StoreUnavailableError as exc:
        # A scrape while the store is down still shows everything else; the lag stays stale.
        log.warning("reconcile lag not measured: %s", exc)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
