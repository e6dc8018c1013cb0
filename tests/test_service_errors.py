"""The sidecar's error answers (problem+json) over real HTTP, on SQLite and on PostgreSQL:
oversized, malformed and unsupported bodies, unknown routes, and the catch-all 500.

Each test gets a fresh store (a new SQLite file, or a new PostgreSQL schema) and its own server
on an ephemeral loopback port.
"""

from __future__ import annotations

import uuid

import httpx
import pytest

from reconciler.service import Settings, create_app

from service_harness import serving
from sidecar_client import Sidecar, assert_problem

# Input must never reach the catch-all 500 (the fixture is in conftest.py).
pytestmark = pytest.mark.usefixtures("no_internal_errors")


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
        store_url: str, caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk_live_" + uuid.uuid4().hex

    def broken() -> None:
        raise RuntimeError(f"a bug that quotes its input: {secret}")

    app = create_app(Settings(db=store_url, sweep_interval_s=0))
    app.add_api_route("/broken", broken)
    with serving(app) as url:
        response = httpx.get(url + "/broken", timeout=10)
    problem = assert_problem(response, 500, "internal")
    assert secret not in response.text
    logged = [r for r in caplog.records if r.name == "reconciler.service.problems"]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert problem["correlation_id"] in logged[0].getMessage()
    caplog.clear()  # this test is the one place the catch-all is meant to answer
