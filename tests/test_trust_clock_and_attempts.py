"""Whose clock counts, and attempts that lose nothing (SPEC section 6, "Trust"), over real HTTP on
SQLite and PostgreSQL: a skewed worker clock delays a verdict and never hastens one; an attempt is
opened before it is sent and completed after; concurrent identical reports are one attempt; a
retry grant binds the attempt it allows and its holder.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from reconciler.core.domain import ProviderContract
from reconciler.testing.patience import PATIENCE_S

from sidecar_client import H, Sidecar, assert_problem, post_as_a_client, running_sidecar

pytestmark = pytest.mark.usefixtures("no_internal_errors")


def claimed(offset_s: float) -> str:
    """A dispatch time as a worker whose clock is `offset_s` off would send it."""
    return (datetime.now(UTC) + timedelta(seconds=offset_s)).isoformat()


def attempt(sidecar: Sidecar, op: str, n: int, expect: int = 201, **fields: Any
            ) -> dict[str, Any]:
    return sidecar.post(f"/v1/operations/{op}/attempts", {
        "attempt": n, "idempotency_key": f"key-{op}", "request_hash": H, "outcome": "timeout",
        **fields}, expect)


def observe(sidecar: Sidecar, op: str, authority: str = "authoritative") -> dict[str, Any]:
    return sidecar.post(f"/v1/operations/{op}/evidence",
                        {"kind": "observation", "probe": "lookup", "authority": authority})


def test_a_slow_worker_clock_does_not_make_a_lagging_zero_conclusive(sidecar: Sidecar) -> None:
    sidecar.store.put_contract(ProviderContract("lagged", idempotency_keys=True,
                                                visibility_lag_s=30))
    sidecar.intent("op-1", "lagged")
    recorded = attempt(sidecar, "op-1", 1, at=claimed(-31))["attempts"][0]
    assert recorded["recorded_at"] > recorded["at"]
    out = observe(sidecar, "op-1", "lagging")
    assert out["verdict"] == "indeterminate"
    assert "zero_not_conclusive" in out["findings"]


def test_a_fast_worker_clock_is_recorded_and_delays_the_verdict(sidecar: Sidecar) -> None:
    sidecar.intent("op-1")
    out = attempt(sidecar, "op-1", 1, at=claimed(60))
    assert out["attempts"][0]["at"] > out["attempts"][0]["recorded_at"]
    after = observe(sidecar, "op-1")
    assert after["verdict"] == "indeterminate"  # a zero now is not after a dispatch "later"


def test_a_slow_clock_cannot_stretch_one_approval_over_two_retries(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "fragile")
    attempt(sidecar, "op-1", 1)
    assert observe(sidecar, "op-1")["next_action"] == "await_approval"
    sidecar.post("/v1/operations/op-1/approval", {"note": "once"})
    grant = sidecar.retry("op-1", "w1").json()
    assert (grant["allowed"], grant["attempt"]) == (True, 2)
    token = grant["grant"]
    attempt(sidecar, "op-1", 2, outcome="dispatching", holder="w1", grant=token,
            at=claimed(-3.5))
    attempt(sidecar, "op-1", 2, outcome="timeout", holder="w1", grant=token, at=claimed(-3.5))
    out = observe(sidecar, "op-1")
    assert out["verdict"] == "verified_not_applied"
    assert out["next_action"] == "await_approval"
    assert sidecar.retry("op-1", "w1").json()["allowed"] is False


def test_an_attempt_opened_before_the_send_is_completed_after(sidecar: Sidecar) -> None:
    sidecar.intent("op-1")
    at = claimed(0)
    opened = attempt(sidecar, "op-1", 1, outcome="dispatching", at=at)
    assert opened["attempts"][0]["outcome"] == "dispatching"
    assert opened["verdict"] == "indeterminate"  # an unknown outcome, like a timeout
    done = attempt(sidecar, "op-1", 1, outcome="response", status=201, at=at)
    assert [(a["outcome"], a["status"]) for a in done["attempts"]] == [("response", 201)]
    assert "success_claim" in done["findings"]
    again = attempt(sidecar, "op-1", 1, 200, outcome="response", status=201, at=at)
    assert again["attempts"] == done["attempts"]
    # Another report of the closed attempt is kept beside it (SPEC section 4), not refused.
    other = attempt(sidecar, "op-1", 1, outcome="timeout", at=at)
    assert [a["outcome"] for a in other["attempts"]] == ["response", "timeout"]


def test_twenty_concurrent_identical_reports_lose_nothing(sidecar: Sidecar) -> None:
    sidecar.intent("op-1")
    body = {"attempt": 1, "idempotency_key": "key-op-1", "request_hash": H,
            "outcome": "timeout", "at": claimed(0)}

    def report(_: int) -> int:
        with httpx.Client(base_url=sidecar.url, timeout=PATIENCE_S) as http:
            return post_as_a_client(http, "/v1/operations/op-1/attempts", body).status_code

    with ThreadPoolExecutor(20) as pool:
        statuses = sorted(pool.map(report, range(20)))
    assert statuses == [200] * 19 + [201]
    assert len(sidecar.get("/v1/operations/op-1")["attempts"]) == 1


def test_a_grant_binds_its_attempt_and_its_holder(store_url: str) -> None:
    with running_sidecar(store_url, retry_lease_ttl_s=0.5) as sidecar:
        sidecar.not_applied("op-1")
        grant = sidecar.retry("op-1", "w1").json()
        assert (grant["allowed"], grant["attempt"]) == (True, 2)
        stolen = sidecar.http.post("/v1/operations/op-1/attempts", json={
            "attempt": 2, "idempotency_key": "key-op-1", "request_hash": H,
            "outcome": "dispatching", "holder": "w2"})
        assert_problem(stolen, 409, "retry-not-granted")
        time.sleep(0.7)  # the grant lapses
        expired = sidecar.http.post("/v1/operations/op-1/attempts", json={
            "attempt": 2, "idempotency_key": "key-op-1", "request_hash": H,
            "outcome": "dispatching", "holder": "w1"})
        assert_problem(expired, 409, "retry-not-granted")
        out = sidecar.get("/v1/operations/op-1")
        assert [a["attempt"] for a in out["attempts"]] == [1]
        assert [e["kind"] for e in out["evidence"]].count("refused_retry") == 2


def test_a_refused_retry_is_evidence_not_a_lock(sidecar: Sidecar) -> None:
    sidecar.not_applied("op-1")
    wrong = sidecar.http.post("/v1/operations/op-1/retry", json={
        "idempotency_key": "key-op-1", "request_hash": "sha256:" + "1" * 64})
    assert_problem(wrong, 422, "retry-mismatch")
    locked = sidecar.get("/v1/operations/op-1")
    assert (locked["verdict"], "refused_retry") == ("unsafe_retry", locked["evidence"][-1]["kind"])
    out = sidecar.post("/v1/operations/op-1/resolution", {"verdict": "verified_not_applied",
                                                          "note": "the worker's bug, fixed"})
    assert (out["verdict"], out["retry_allowed"]) == ("verified_not_applied", True)
    assert "refused_retry" in [e["kind"] for e in out["evidence"]]
    assert sidecar.retry("op-1", "w1").json()["allowed"] is True
