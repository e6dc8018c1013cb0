"""The sidecar's retry gate over real HTTP, on SQLite and on PostgreSQL: one grant per
verdict, refusals, approval of a non-compensable retry, and concurrent askers.

Each test gets a fresh store (a new SQLite file, or a new PostgreSQL schema) and its own server
on an ephemeral loopback port.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import httpx
import pytest

from reconciler.testing.patience import PATIENCE_S

from sidecar_client import OTHER_H, H, Sidecar, assert_problem, post_as_a_client

# Input must never reach the catch-all 500 (the fixture is in conftest.py).
pytestmark = pytest.mark.usefixtures("no_internal_errors")


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


def test_approval_opens_the_retry_of_a_non_compensable_action(sidecar: Sidecar) -> None:
    out = sidecar.not_applied("op-1", "fragile")
    assert (out["retry_allowed"], out["next_action"]) == (False, "await_approval")
    assert sidecar.retry("op-1").json()["allowed"] is False
    out = sidecar.post("/v1/operations/op-1/approval", {"actor": "ops@example.com"})
    assert out["retry_allowed"] is True
    assert out["evidence"][-1]["kind"] == "approval"
    assert sidecar.retry("op-1").json()["allowed"] is True


def test_concurrent_retry_requests_get_exactly_one_grant(sidecar: Sidecar) -> None:
    sidecar.not_applied("op-1")
    start = threading.Barrier(32)
    statuses: list[tuple[int, bool]] = []

    def ask(n: int) -> None:
        with httpx.Client(base_url=sidecar.url, timeout=PATIENCE_S) as http:
            start.wait(PATIENCE_S)
            response = post_as_a_client(http, "/v1/operations/op-1/retry", {
                "idempotency_key": "key-op-1", "request_hash": H, "holder": f"worker-{n}"})
            statuses.append((response.status_code, response.json()["allowed"]))

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(PATIENCE_S)
    assert sorted(statuses) == [(200, True)] + [(409, False)] * 31
