"""The sidecar's metrics and health endpoints over real HTTP, on SQLite and on PostgreSQL.

Each test gets a fresh store (a new SQLite file, or a new PostgreSQL schema) and its own server
on an ephemeral loopback port.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine

from sidecar_client import Sidecar, assert_problem, zero_probe

# Input must never reach the catch-all 500 (the fixture is in conftest.py).
pytestmark = pytest.mark.usefixtures("no_internal_errors")


def _samples(sidecar: Sidecar) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = sidecar.http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text)
            for s in family.samples}


def test_metrics_expose_every_metric_after_exercising_it(sidecar: Sidecar) -> None:
    escalations_before = _samples(sidecar)[("reconciler_escalations_total", ())]
    sidecar.probes["pay"] = [zero_probe()]
    sidecar.intent("op-1")
    sidecar.intent("op-1", status=200)
    sidecar.attempt("op-1")
    sidecar.post("/v1/operations/op-1/reconcile", None, 200)
    assert sidecar.retry("op-1").json()["allowed"] is True
    sidecar.intent("op-2", "slow")
    sidecar.attempt("op-2")
    sidecar.post("/v1/operations/op-2/reconcile", None, 200)
    samples = _samples(sidecar)
    for name, labels in [
        ("reconciler_intents_recorded_total", {"result": "created"}),
        ("reconciler_intents_recorded_total", {"result": "repeat"}),
        ("reconciler_attempts_total", {"outcome": "timeout"}),
        ("reconciler_verdicts_total", {"verdict": "verified_not_applied"}),
        ("reconciler_retry_decisions_total", {"result": "granted"}),
        ("reconciler_probe_duration_seconds_count", {"probe": "zero"}),
        ("reconciler_probe_results_total", {"probe": "zero", "authority": "authoritative"}),
        ("reconciler_reconcile_lag_seconds", {}),
        ("reconciler_store_duration_seconds_count", {"method": "record_intent"}),
        ("reconciler_store_duration_seconds_count", {"method": "grant_retry"}),
    ]:
        assert samples.get((name, tuple(sorted(labels.items()))), 0) >= (
            0 if name == "reconciler_reconcile_lag_seconds" else 1), (name, labels)
    assert samples[("reconciler_escalations_total", ())] == escalations_before + 1


def test_store_latency_is_timed_per_port_method_and_not_for_its_building_blocks(
        sidecar: Sidecar) -> None:
    def timed(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
        return {dict(labels)["method"]: value for (name, labels), value in samples.items()
                if name == "reconciler_store_duration_seconds_count"}

    before = timed(_samples(sidecar))
    sidecar.intent("op-1")
    sidecar.attempt("op-1")
    after = timed(_samples(sidecar))
    assert after["record_intent"] - before.get("record_intent", 0) == 1
    assert after["record_attempt_and_decide"] - before.get("record_attempt_and_decide", 0) == 1
    # What a port method is made of (a write's commit, a read transaction, a contract read in
    # a transaction) is inside its time already.
    assert not {"commit", "reading", "contract_in", "session"} & set(after)


def test_reconcile_lag_measures_the_oldest_due_operation(sidecar: Sidecar) -> None:
    sidecar.intent("op-1")
    sidecar.attempt("op-1")
    time.sleep(0.05)
    assert _samples(sidecar)[("reconciler_reconcile_lag_seconds", ())] > 0


def test_healthz_answers_200(sidecar: Sidecar) -> None:
    assert sidecar.get("/healthz") == {"status": "ok"}
    assert sidecar.get("/readyz") == {"status": "ready"}


def test_readyz_is_503_while_the_store_is_down(sidecar: Sidecar, tmp_path: Path) -> None:
    sidecar.intent("op-1")
    working = sidecar.store.engine
    sidecar.store.engine = create_engine(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    try:
        assert_problem(sidecar.http.get("/readyz"), 503, "store-unavailable")
        assert_problem(sidecar.http.get("/v1/operations/op-1"), 503, "store-unavailable")
        assert sidecar.http.get("/healthz").status_code == 200
        assert sidecar.http.get("/metrics").status_code == 200
    finally:
        sidecar.store.engine.dispose()
        sidecar.store.engine = working
    assert sidecar.get("/readyz") == {"status": "ready"}
