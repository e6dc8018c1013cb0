"""The sidecar's records over real HTTP, on SQLite and on PostgreSQL: intents, attempts,
evidence and resolutions, the verdict read back, and the operation list.

Each test gets a fresh store (a new SQLite file, or a new PostgreSQL schema) and its own server
on an ephemeral loopback port.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from sidecar_client import OTHER_H, H, Sidecar, assert_problem, post_as_a_client

# Input must never reach the catch-all 500 (the fixture is in conftest.py).
pytestmark = pytest.mark.usefixtures("no_internal_errors")


def test_record_intent_answers_201_with_server_time(sidecar: Sidecar) -> None:
    before = datetime.now(UTC)
    out = sidecar.intent("run-1/call-2")
    assert out["intent"]["operation_id"] == "run-1/call-2"
    assert before <= datetime.fromisoformat(out["intent"]["at"]) <= datetime.now(UTC)
    assert out["verdict"] == "indeterminate"
    assert out["attempts"] == [] and out["evidence"] == []
    assert sidecar.get("/v1/operations/run-1/call-2")["intent"]["request_hash"] == H


def test_identical_repeat_of_an_intent_answers_200(sidecar: Sidecar) -> None:
    first = sidecar.intent("op-1")
    again = sidecar.intent("op-1", status=200)
    assert again["intent"] == first["intent"]


def test_intent_conflict_answers_409_and_is_kept_in_the_timeline(sidecar: Sidecar) -> None:
    sidecar.intent("op-1")
    response = sidecar.http.post("/v1/operations", json={
        "operation_id": "op-1", "request_hash": OTHER_H, "idempotency_key": "key-op-1",
        "provider": "pay", "action": "charge", "effect": "non_idempotent"})
    assert assert_problem(response, 409, "intent-conflict")["operation_id"] == "op-1"
    out = sidecar.get("/v1/operations/op-1")
    assert out["intent"]["request_hash"] == H
    assert [e["kind"] for e in out["evidence"]] == ["intent_conflict"]
    assert out["evidence"][0]["request_hash"] == OTHER_H
    assert "intent_conflict" in out["findings"]


def test_attempt_is_recorded_and_its_repeat_answers_200(sidecar: Sidecar) -> None:
    sidecar.intent("op-1")
    out = sidecar.attempt("op-1")
    assert [(a["attempt"], a["outcome"]) for a in out["attempts"]] == [(1, "timeout")]
    again = sidecar.attempt("op-1", status=200)  # resent without `at`: the same report
    assert again["attempts"] == out["attempts"]


def test_a_2xx_reported_after_a_timeout_is_kept_and_a_later_zero_is_false_success(
        sidecar: Sidecar) -> None:
    """The field trial's lost 2xx: answered 409 and dropped, so the zero that followed gave
    verified_not_applied and a retry. Every report is kept (SPEC section 4), and a 2xx in any
    of them is a success claim that a conclusive zero contradicts."""
    sidecar.intent("op-1")
    dispatched = datetime.now(UTC).isoformat()
    sidecar.attempt("op-1", at=dispatched)
    late = sidecar.post("/v1/operations/op-1/attempts", {
        "attempt": 1, "idempotency_key": "key-op-1", "request_hash": H, "at": dispatched,
        "outcome": "response", "status": 200})
    assert [(a["attempt"], a["outcome"], a["status"]) for a in late["attempts"]] == [
        (1, "timeout", None), (1, "response", 200)]
    out = sidecar.zero("op-1")
    assert (out["verdict"], out["next_action"], out["retry_allowed"]) == (
        "false_success", "mark_run_unhealthy", False)


def test_reports_of_one_attempt_racing_are_all_kept(sidecar: Sidecar) -> None:
    ops = [f"op-{n}" for n in range(5)]  # the field trial lost 5 of 5
    for op in ops:
        sidecar.intent(op)
    reports = [(op, fields) for op in ops
               for fields in ({"outcome": "timeout"}, {"outcome": "response", "status": 200})]
    start = threading.Barrier(len(reports), timeout=30)

    def report(op: str, fields: dict[str, object]) -> int:
        start.wait()
        return post_as_a_client(sidecar.http, f"/v1/operations/{op}/attempts", {
            "attempt": 1, "idempotency_key": f"key-{op}", "request_hash": H, **fields}
        ).status_code

    with ThreadPoolExecutor(len(reports)) as pool:
        statuses = list(pool.map(lambda r: report(*r), reports, timeout=60))
    assert statuses == [201] * len(reports)
    for op in ops:
        kept = sidecar.get(f"/v1/operations/{op}")["attempts"]
        assert sorted(a["outcome"] for a in kept) == ["response", "timeout"]


def test_what_the_request_carried_is_recorded_with_the_intent_and_shown(
        sidecar: Sidecar) -> None:
    body = {"operation_id": "op-1", "request_hash": H, "idempotency_key": "key-op-1",
            "provider": "pay", "action": "charge", "effect": "non_idempotent"}
    out = sidecar.post("/v1/operations", {**body, "carries": [
        "provider_ref", "operation_id", "operation_id"]})
    assert out["intent"]["carries"] == ["operation_id", "provider_ref"]
    assert sidecar.get("/v1/operations/op-1")["intent"]["carries"] == [
        "operation_id", "provider_ref"]
    # Not said: null (SPEC section 3 reads it as the recorded key alone); said empty: nothing.
    assert sidecar.post("/v1/operations", {**body, "operation_id": "op-2"})["intent"][
        "carries"] is None
    assert sidecar.post("/v1/operations", {**body, "operation_id": "op-3", "carries": []})[
        "intent"]["carries"] == []
    wrong = sidecar.http.post("/v1/operations", json={**body, "operation_id": "op-4",
                                                      "carries": ["the_body"]})
    assert_problem(wrong, 422, "validation")


def test_attempt_of_an_unknown_operation_is_404(sidecar: Sidecar) -> None:
    response = sidecar.http.post("/v1/operations/nope/attempts", json={
        "attempt": 1, "request_hash": H, "outcome": "timeout"})
    assert assert_problem(response, 404, "unknown-operation")["operation_id"] == "nope"
    assert_problem(sidecar.http.get("/v1/operations/nope"), 404, "unknown-operation")


def test_evidence_is_recorded_in_order(sidecar: Sidecar) -> None:
    sidecar.intent("op-1")
    sidecar.attempt("op-1")
    sidecar.post("/v1/operations/op-1/evidence", {
        "kind": "observation", "probe": "search", "authority": "weak",
        "matches": [{"provider_ref": "ch_9"}]})
    out = sidecar.post("/v1/operations/op-1/evidence", {
        "kind": "receipt", "provider_ref": "ch_1", "request_hash": H, "source": "lookup"})
    assert [(e["kind"], e["source"]) for e in out["evidence"]] == [
        ("observation", "search"), ("receipt", "lookup")]
    assert out["evidence"][0]["matches"] == [{"provider_ref": "ch_9", "request_hash": None}]
    assert out["verdict"] == "verified_applied"


def test_evidence_dated_in_the_future_is_refused(sidecar: Sidecar) -> None:
    sidecar.intent("op-1")
    later = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    response = sidecar.http.post("/v1/operations/op-1/evidence", json={
        "kind": "observation", "probe": "p", "authority": "authoritative", "at": later})
    assert_problem(response, 422, "validation")
    assert sidecar.get("/v1/operations/op-1")["evidence"] == []


def test_verdict_via_get_is_decided_from_the_evidence(sidecar: Sidecar) -> None:
    sidecar.not_applied("op-1")
    out = sidecar.get("/v1/operations/op-1")
    assert (out["verdict"], out["next_action"], out["retry_allowed"], out["escalated"]) == (
        "verified_not_applied", "retry_same_key", True, False)
    assert "verified_not_applied" in out["findings"]


def test_resolution_decides_the_verdict(sidecar: Sidecar) -> None:
    sidecar.intent("op-1")
    sidecar.attempt("op-1")
    out = sidecar.post("/v1/operations/op-1/resolution", {
        "verdict": "verified_applied", "actor": "ops@example.com", "note": "seen in dashboard"})
    assert out["verdict"] == "verified_applied"
    assert "human_resolution" in out["findings"]
    assert (out["evidence"][-1]["kind"], out["evidence"][-1]["authority"]) == (
        "resolution", "human")


def test_list_is_paginated_by_cursor_and_filtered(sidecar: Sidecar) -> None:
    for n in range(1, 6):
        sidecar.intent(f"op-{n}", "slow" if n == 4 else "pay")
    sidecar.post("/v1/operations/op-2/evidence", {"kind": "receipt", "provider_ref": "ch_2",
                                                  "request_hash": H, "source": "lookup"})
    sidecar.attempt("op-4")
    assert sidecar.post("/v1/operations/op-4/reconcile", None, 200)["escalated"] is True
    pages, after = [], None
    for _ in range(5):
        query = "?limit=2" + (f"&after={after}" if after else "")
        page = sidecar.get("/v1/operations" + query)
        pages.append([item["operation_id"] for item in page["items"]])
        after = page["next_cursor"]
        if after is None:
            break
    assert pages == [["op-1", "op-2"], ["op-3", "op-4"], ["op-5"]]

    def ids(query: str) -> list[str]:
        return [item["operation_id"] for item in sidecar.get("/v1/operations?" + query)["items"]]

    assert ids("verdict=verified_applied") == ["op-2"]
    assert ids("escalated=true") == ["op-4"]
    assert ids("escalated=false&verdict=indeterminate") == ["op-1", "op-3", "op-5"]
    for query in ("verdict=maybe", "limit=2&limit=3", "verdcit=indeterminate"):
        assert_problem(sidecar.http.get("/v1/operations?" + query), 422, "validation")
