"""Reconciling through the sidecar over real HTTP, on SQLite and on PostgreSQL: on request,
against another sweeper's lease, and by the periodic sweep.

Each test gets a fresh store (a new SQLite file, or a new PostgreSQL schema) and its own server
on an ephemeral loopback port.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from reconciler.store.leases import SqlLeases

from sidecar_client import Sidecar, ZeroProbe, assert_problem, running_sidecar

# Input must never reach the catch-all 500 (the fixture is in conftest.py).
pytestmark = pytest.mark.usefixtures("no_internal_errors")


def test_reconcile_runs_the_probes_now(sidecar: Sidecar) -> None:
    sidecar.probes["pay"] = [ZeroProbe()]
    sidecar.intent("op-1")
    sidecar.attempt("op-1")
    out = sidecar.post("/v1/operations/op-1/reconcile", None, 200)
    assert out["verdict"] == "verified_not_applied"
    assert [(e["kind"], e["source"]) for e in out["evidence"]] == [("observation", "zero")]


def test_reconcile_answers_409_while_another_sweeper_probes(sidecar: Sidecar) -> None:
    sidecar.intent("op-1")
    assert SqlLeases(sidecar.store).claim("op-1", "other-replica", datetime.now(UTC), 60)
    response = sidecar.http.post("/v1/operations/op-1/reconcile")
    assert_problem(response, 409, "reconcile-in-progress")
    assert_problem(sidecar.http.post("/v1/operations/nope/reconcile"), 404, "unknown-operation")


def test_periodic_sweep_probes_due_operations(store_url: str) -> None:
    with running_sidecar(store_url, sweep_interval_s=0.05) as sidecar:
        sidecar.probes["pay"] = [ZeroProbe()]
        sidecar.intent("op-1")
        sidecar.attempt("op-1")
        deadline = time.monotonic() + 10
        while sidecar.get("/v1/operations/op-1")["verdict"] != "verified_not_applied":
            assert time.monotonic() < deadline, "the sweep did not probe the operation"
            time.sleep(0.05)
