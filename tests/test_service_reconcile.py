"""Reconciling through the sidecar over real HTTP, on SQLite and on PostgreSQL: on request,
against another sweeper's lease, and by the periodic sweep.

Each test gets a fresh store (a new SQLite file, or a new PostgreSQL schema) and its own server
on an ephemeral loopback port.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from reconciler.core.domain import Carried
from reconciler.core.sight import Sight
from reconciler.store.leases import SqlLeases

from sidecar_client import Sidecar, assert_problem, running_sidecar, zero_probe

# Input must never reach the catch-all 500 (the fixture is in conftest.py).
pytestmark = pytest.mark.usefixtures("no_internal_errors")


def test_reconcile_runs_the_probes_now(sidecar: Sidecar) -> None:
    sidecar.probes["pay"] = [zero_probe()]
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
        sidecar.probes["pay"] = [zero_probe()]
        sidecar.intent("op-1")
        sidecar.attempt("op-1")
        deadline = time.monotonic() + 10
        while sidecar.get("/v1/operations/op-1")["verdict"] != "verified_not_applied":
            assert time.monotonic() < deadline, "the sweep did not probe the operation"
            time.sleep(0.05)


# --- a zero counts only where the probe could have seen the effect (SPEC section 3) ----------

@pytest.mark.parametrize(("sight", "question"), [
    (Sight(frozenset({"refund"}), frozenset(Carried)), "scope"),
    # The intent recorded a key and said nothing else: its request carried the key alone.
    (Sight(frozenset({"charge"}), frozenset({Carried.OPERATION_ID})), "correlation"),
])
def test_reconcile_records_an_empty_read_by_a_probe_blind_to_the_operation_as_unavailable(
        sidecar: Sidecar, sight: Sight, question: str) -> None:
    sidecar.probes["pay"] = [zero_probe(sight=sight)]
    sidecar.intent("op-1")
    sidecar.attempt("op-1", outcome="not_sent")  # settled: only sight keeps the zero out
    out = sidecar.post("/v1/operations/op-1/reconcile", None, 200)
    [evidence] = out["evidence"]
    assert evidence["authority"] == "unavailable"
    assert evidence["error"].startswith(f"probe_blind: {question}: probe 'zero' ")
    assert out["verdict"] == "indeterminate" and not out["retry_allowed"]


def test_the_periodic_sweep_records_a_blind_empty_read_as_unavailable(store_url: str) -> None:
    with running_sidecar(store_url, sweep_interval_s=0.05) as sidecar:
        refunds = Sight(frozenset({"refund"}), frozenset(Carried))
        sidecar.probes["pay"] = [zero_probe(sight=refunds)]
        sidecar.intent("op-1")
        sidecar.attempt("op-1")
        deadline = time.monotonic() + 10
        while not sidecar.get("/v1/operations/op-1")["evidence"]:
            assert time.monotonic() < deadline, "the sweep did not probe the operation"
            time.sleep(0.05)
        [evidence] = sidecar.get("/v1/operations/op-1")["evidence"]
        assert evidence["authority"] == "unavailable"
        assert evidence["error"].startswith("probe_blind: scope: ")
