"""The sidecar's HTTP surface (SPEC section 6) over real HTTP, on SQLite and on PostgreSQL.

Each test gets a fresh store (a new SQLite file, or a new PostgreSQL schema) and its own server
on an ephemeral loopback port.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from sqlalchemy import MetaData, create_engine, select

from probes.base import Probe, ProbeTarget
from reconciler.domain import Authority, Observation, ProviderContract, Receipt
from reconciler.hashing import request_hash
from reconciler.ledger import Ledger
from reconciler.service import Settings, create_app
from reconciler.store.leases import SqlLeases
from reconciler.store.schema import open_store
from reconciler.store.sql import SqlStore

from databases import pg_unreachable
from service_harness import database, serving, serving_process

PROBLEMS = "https://reconciler.dev/problems/"
H = request_hash({"amount": 100, "currency": "eur"})
OTHER_H = request_hash({"amount": 200, "currency": "eur"})
CONTRACTS = (
    ProviderContract("pay", idempotency_keys=True, visibility_lag_s=0, max_attempts=3),
    ProviderContract("fragile", idempotency_keys=True, visibility_lag_s=0, compensable=False),
    ProviderContract("slow", idempotency_keys=True, reconcile_deadline_s=0),
)
TOKEN = "test-token-" + uuid.uuid4().hex


class ZeroProbe:
    """An authoritative probe that finds nothing, after `delay_s`."""

    name = "zero"

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    def probe(self, target: ProbeTarget) -> Observation | Receipt:
        time.sleep(self.delay_s)
        return Observation(target.operation_id, datetime.now(UTC), self.name,
                           Authority.AUTHORITATIVE)


@dataclass
class Sidecar:
    url: str
    http: httpx.Client
    store: SqlStore
    probes: dict[str, list[Probe]] = field(default_factory=dict)

    def intent(self, op: str, provider: str = "pay", *, hash_: str = H,
               status: int = 201) -> dict[str, Any]:
        return self.post("/v1/operations", {
            "operation_id": op, "request_hash": hash_, "idempotency_key": f"key-{op}",
            "provider": provider, "action": "charge", "effect": "non_idempotent"}, status)

    def attempt(self, op: str, n: int = 1, status: int = 201, **fields: Any) -> dict[str, Any]:
        body = {"attempt": n, "idempotency_key": f"key-{op}", "request_hash": H,
                "outcome": "timeout", **fields}
        return self.post(f"/v1/operations/{op}/attempts", body, status)

    def zero(self, op: str) -> dict[str, Any]:
        return self.post(f"/v1/operations/{op}/evidence",
                         {"kind": "observation", "probe": "lookup", "authority": "authoritative"})

    def not_applied(self, op: str, provider: str = "pay") -> dict[str, Any]:
        """An operation that timed out and that an authoritative probe then did not find."""
        self.intent(op, provider)
        self.attempt(op)
        return self.zero(op)

    def retry(self, op: str, holder: str | None = None, *, hash_: str = H) -> httpx.Response:
        return self.http.post(f"/v1/operations/{op}/retry", json={
            "idempotency_key": f"key-{op}", "request_hash": hash_, "holder": holder})

    def post(self, path: str, body: Any, status: int = 201) -> dict[str, Any]:
        response = self.http.post(path, json=body)
        assert response.status_code == status, response.text
        result: dict[str, Any] = response.json()
        return result

    def get(self, path: str, status: int = 200) -> dict[str, Any]:
        response = self.http.get(path)
        assert response.status_code == status, response.text
        result: dict[str, Any] = response.json()
        return result


@contextmanager
def running_sidecar(db_url: str, **settings: Any) -> Iterator[Sidecar]:
    store = open_store(db_url)
    for contract in CONTRACTS:
        store.put_contract(contract)
    probes: dict[str, list[Probe]] = {}
    app = create_app(Settings(db=db_url, **{"sweep_interval_s": 0, **settings}),
                     ledger=Ledger(store), probes_for=lambda provider: probes.get(provider, []))
    try:
        headers = {"Authorization": f"Bearer {TOKEN}"} if "token" in settings else {}
        with serving(app) as url, httpx.Client(base_url=url, timeout=30,
                                               headers=headers) as http:
            yield Sidecar(url, http, store, probes)
    finally:
        store.engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "postgresql" and (reason := pg_unreachable()):
        pytest.skip(reason)
    with database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def sidecar(db_url: str) -> Iterator[Sidecar]:
    with running_sidecar(db_url) as running:
        yield running


@pytest.fixture(autouse=True)
def no_internal_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Input must never reach the catch-all 500."""
    yield
    unexpected = [r for r in caplog.records
                  if r.name == "reconciler.service.problems" and r.levelno >= logging.ERROR]
    assert not unexpected, [r.getMessage() for r in unexpected]


def assert_problem(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert problem["type"] == PROBLEMS + kind
    assert problem["status"] == status
    assert problem["title"] and problem["detail"] and problem["instance"]
    return problem


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
    sidecar.attempt("op-1", status=200)  # resent without `at`: the same attempt
    conflict = sidecar.http.post("/v1/operations/op-1/attempts", json={
        "attempt": 1, "idempotency_key": "key-op-1", "request_hash": H,
        "outcome": "response", "status": 201})
    assert_problem(conflict, 409, "attempt-conflict")


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


def test_retry_is_granted_once_and_the_next_holder_gets_409(sidecar: Sidecar) -> None:
    sidecar.not_applied("op-1")
    granted = sidecar.retry("op-1", "worker-a")
    assert granted.status_code == 200, granted.text
    body = granted.json()
    assert (body["allowed"], body["verdict"], body["holder"]) == (
        True, "verified_not_applied", "worker-a")
    assert datetime.fromisoformat(body["lease_expires_at"]) > datetime.now(UTC)
    busy = assert_problem(sidecar.retry("op-1", "worker-b"), 409, "retry-in-progress")
    assert (busy["allowed"], busy["holder"], busy["lease_expires_at"]) == (
        False, "worker-b", None)
    anonymous = sidecar.retry("op-1")
    assert assert_problem(anonymous, 409, "retry-in-progress")["holder"].startswith("holder-")


def test_retry_with_another_hash_is_422_and_the_verdict_unsafe_retry(sidecar: Sidecar) -> None:
    sidecar.not_applied("op-1")
    problem = assert_problem(sidecar.retry("op-1", hash_=OTHER_H), 422, "retry-mismatch")
    assert (problem["allowed"], problem["verdict"]) == (False, "unsafe_retry")
    out = sidecar.get("/v1/operations/op-1")
    assert out["verdict"] == "unsafe_retry"
    assert out["evidence"][-1]["kind"] == "refused_retry"


def test_retry_while_indeterminate_is_refused_with_200(sidecar: Sidecar) -> None:
    sidecar.intent("op-1")
    sidecar.attempt("op-1")
    response = sidecar.retry("op-1")
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["allowed"], body["verdict"], body["lease_expires_at"]) == (
        False, "indeterminate", None)


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


def test_resolution_decides_the_verdict(sidecar: Sidecar) -> None:
    sidecar.intent("op-1")
    sidecar.attempt("op-1")
    out = sidecar.post("/v1/operations/op-1/resolution", {
        "verdict": "verified_applied", "actor": "ops@example.com", "note": "seen in dashboard"})
    assert out["verdict"] == "verified_applied"
    assert "human_resolution" in out["findings"]
    assert (out["evidence"][-1]["kind"], out["evidence"][-1]["authority"]) == (
        "resolution", "human")


def test_approval_opens_the_retry_of_a_non_compensable_action(sidecar: Sidecar) -> None:
    out = sidecar.not_applied("op-1", "fragile")
    assert (out["retry_allowed"], out["next_action"]) == (False, "await_approval")
    assert sidecar.retry("op-1").json()["allowed"] is False
    out = sidecar.post("/v1/operations/op-1/approval", {"actor": "ops@example.com"})
    assert out["retry_allowed"] is True
    assert out["evidence"][-1]["kind"] == "approval"
    assert sidecar.retry("op-1").json()["allowed"] is True


def test_webhook_is_recorded_as_a_receipt(sidecar: Sidecar) -> None:
    sidecar.intent("op-1")
    sidecar.attempt("op-1")
    ack = sidecar.post("/v1/webhooks/pay", {"operation_id": "op-1", "provider_ref": "ch_1",
                                            "request_hash": H, "message": "ignored"}, 202)
    assert ack == {"operation_id": "op-1", "accepted": True}
    out = sidecar.get("/v1/operations/op-1")
    assert [(e["kind"], e["source"], e["provider_ref"]) for e in out["evidence"]] == [
        ("receipt", "webhook", "ch_1")]
    assert out["verdict"] == "verified_applied"
    for provider, op in (("pay", "nope"), ("fragile", "op-1")):
        response = sidecar.http.post(f"/v1/webhooks/{provider}", json={
            "operation_id": op, "provider_ref": "ch_2"})
        assert_problem(response, 404, "unknown-operation")


def test_list_is_paginated_by_cursor_and_filtered(sidecar: Sidecar) -> None:
    for n in range(1, 6):
        sidecar.intent(f"op-{n}", "slow" if n == 4 else "pay")
    sidecar.post("/v1/webhooks/pay", {"operation_id": "op-2", "provider_ref": "ch_2",
                                      "request_hash": H}, 202)
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


def _samples(sidecar: Sidecar) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = sidecar.http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text)
            for s in family.samples}


def test_metrics_expose_every_metric_after_exercising_it(sidecar: Sidecar) -> None:
    escalations_before = _samples(sidecar)[("reconciler_escalations_total", ())]
    sidecar.probes["pay"] = [ZeroProbe()]
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
        ("reconciler_store_duration_seconds_count", {"method": "acquire_retry"}),
    ]:
        assert samples.get((name, tuple(sorted(labels.items()))), 0) >= (
            0 if name == "reconciler_reconcile_lag_seconds" else 1), (name, labels)
    assert samples[("reconciler_escalations_total", ())] == escalations_before + 1


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


def test_oversized_body_is_413_before_parsing(sidecar: Sidecar) -> None:
    big = b'{"operation_id": "' + b"x" * (64 * 1024) + b'"}'
    declared = sidecar.http.post("/v1/operations", content=big,
                                 headers={"content-type": "application/json"})
    assert_problem(declared, 413, "payload-too-large")
    streamed = sidecar.http.post("/v1/operations", content=iter([big[:40_000], big[40_000:]]),
                                 headers={"content-type": "application/json"})
    assert "content-length" not in streamed.request.headers
    assert_problem(streamed, 413, "payload-too-large")


def test_malformed_json_is_400_and_invalid_fields_are_422(sidecar: Sidecar) -> None:
    response = sidecar.http.post("/v1/operations", content=b'{"operation_id": ',
                                 headers={"content-type": "application/json"})
    assert_problem(response, 400, "malformed-json")
    secret = "sk_live_" + uuid.uuid4().hex
    response = sidecar.http.post("/v1/operations", json={
        "operation_id": "op 1", "request_hash": secret, "provider": "pay", "action": "charge",
        "effect": "sometimes"})
    problem = assert_problem(response, 422, "validation")
    assert {tuple(e["loc"]) for e in problem["errors"]} == {
        ("body", "operation_id"), ("body", "request_hash"), ("body", "effect")}
    assert secret not in response.text


def test_non_json_body_is_415(sidecar: Sidecar) -> None:
    response = sidecar.http.post("/v1/operations", content=b"operation_id=op-1",
                                 headers={"content-type": "application/x-www-form-urlencoded"})
    assert_problem(response, 415, "unsupported-media-type")


def test_unknown_route_is_404_and_wrong_method_405(sidecar: Sidecar) -> None:
    assert_problem(sidecar.http.get("/v2/operations"), 404, "not-found")
    response = sidecar.http.delete("/v1/operations")
    assert_problem(response, 405, "method-not-allowed")
    assert "POST" in response.headers["allow"]


def test_unexpected_error_is_a_500_problem_with_a_correlation_id(
        db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk_live_" + uuid.uuid4().hex

    def broken() -> None:
        raise RuntimeError(f"a bug that quotes its input: {secret}")

    app = create_app(Settings(db=db_url, sweep_interval_s=0))
    app.add_api_route("/broken", broken)
    with serving(app) as url:
        response = httpx.get(url + "/broken", timeout=10)
    problem = assert_problem(response, 500, "internal")
    assert secret not in response.text
    logged = [r for r in caplog.records if r.name == "reconciler.service.problems"]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert problem["correlation_id"] in logged[0].getMessage()
    caplog.clear()  # this test is the one place the catch-all is meant to answer


def test_token_is_required_when_configured(db_url: str) -> None:
    with running_sidecar(db_url, token=SecretStr(TOKEN)) as sidecar:
        anonymous = httpx.get(sidecar.url + "/v1/operations")
        problem = assert_problem(anonymous, 401, "unauthorized")
        assert anonymous.headers["www-authenticate"] == "Bearer"
        assert TOKEN not in anonymous.text and "detail" in problem
        wrong = httpx.get(sidecar.url + "/v1/operations",
                          headers={"Authorization": "Bearer " + TOKEN[:-1]})
        assert_problem(wrong, 401, "unauthorized")
        assert wrong.headers["www-authenticate"].startswith("Bearer error=")
        assert httpx.get(sidecar.url + "/openapi.json").status_code == 401
        assert httpx.get(sidecar.url + "/healthz").status_code == 200
        assert sidecar.get("/v1/operations") == {"items": [], "next_cursor": None}


def test_store_holds_no_secrets_after_a_run(sidecar: Sidecar) -> None:
    secret = "sk_live_" + uuid.uuid4().hex
    arguments = {"to": "alice@example.com", "text": "your code is 4711", "api_key": secret}
    hash_ = request_hash(arguments)
    sidecar.probes["pay"] = [ZeroProbe()]
    responses = [sidecar.intent("op-1", hash_=hash_)]
    responses.append(sidecar.post("/v1/operations/op-1/attempts", {
        "attempt": 1, "idempotency_key": "key-op-1", "request_hash": hash_,
        "outcome": "timeout"}))
    responses.append(sidecar.post("/v1/operations/op-1/reconcile", None, 200))
    responses.append(sidecar.retry("op-1", hash_=hash_).json())
    responses.append(sidecar.post("/v1/webhooks/pay", {
        "operation_id": "op-1", "provider_ref": "ch_1", "request_hash": hash_,
        "text": arguments["text"], "api_key": secret}, 202))
    responses.append(sidecar.get("/v1/operations/op-1"))
    assert secret not in repr(responses) and arguments["text"] not in repr(responses)
    metadata = MetaData()
    metadata.reflect(sidecar.store.engine)
    with sidecar.store.engine.connect() as conn:
        stored = repr([conn.execute(select(t)).all() for t in metadata.sorted_tables])
    assert hash_ in stored
    assert secret not in stored and arguments["text"] not in stored


def test_concurrent_retry_requests_get_exactly_one_grant(sidecar: Sidecar) -> None:
    sidecar.not_applied("op-1")
    start = threading.Barrier(32)
    statuses: list[tuple[int, bool]] = []

    def ask(n: int) -> None:
        with httpx.Client(base_url=sidecar.url, timeout=60) as http:
            start.wait(10)
            response = http.post("/v1/operations/op-1/retry", json={
                "idempotency_key": "key-op-1", "request_hash": H, "holder": f"worker-{n}"})
            statuses.append((response.status_code, response.json()["allowed"]))

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(statuses) == [(200, True)] + [(409, False)] * 31


def test_shutdown_finishes_requests_in_flight(db_url: str) -> None:
    answers: list[int] = []
    with running_sidecar(db_url) as sidecar:
        sidecar.probes["pay"] = [ZeroProbe(delay_s=0.5)]
        sidecar.intent("op-1")
        sidecar.attempt("op-1")
        slow = threading.Thread(target=lambda: answers.append(
            httpx.post(sidecar.url + "/v1/operations/op-1/reconcile", timeout=30).status_code))
        slow.start()
        time.sleep(0.2)  # the reconcile is now waiting on its probe
    slow.join(30)
    assert answers == [200]


def test_periodic_sweep_probes_due_operations(db_url: str) -> None:
    with running_sidecar(db_url, sweep_interval_s=0.05) as sidecar:
        sidecar.probes["pay"] = [ZeroProbe()]
        sidecar.intent("op-1")
        sidecar.attempt("op-1")
        deadline = time.monotonic() + 10
        while sidecar.get("/v1/operations/op-1")["verdict"] != "verified_not_applied":
            assert time.monotonic() < deadline, "the sweep did not probe the operation"
            time.sleep(0.05)


def test_served_process_applies_its_config_and_stops_on_sigterm(db_url: str,
                                                               tmp_path: Path) -> None:
    config = tmp_path / "reconciler.toml"
    config.write_text('[service]\nsweep_interval_s = 0\ntoken_env = "SIDECAR_TOKEN"\n\n'
                      '[providers.pay]\nidempotency_keys = true\nvisibility_lag_s = 0\n')
    env = {"RECONCILER_DB": db_url, "RECONCILER_CONFIG": str(config), "SIDECAR_TOKEN": TOKEN}
    with serving_process(env, cwd=tmp_path) as service, httpx.Client(
            base_url=service.url, headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=10) as http:
        client = Sidecar(service.url, http, open_store(db_url))
        try:
            # Retries are allowed only because the file says the provider has idempotency keys.
            assert client.not_applied("op-1")["retry_allowed"] is True
        finally:
            client.store.engine.dispose()
        # uvicorn re-raises the signal once it has shut down, so the status says SIGTERM.
        assert service.stop() == -signal.SIGTERM
    output = "".join(service.output)
    assert "Application shutdown complete" in output
    assert "***set***" in output and TOKEN not in output
