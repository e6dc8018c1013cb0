"""Who may give evidence (SPEC section 6, "Trust"), over real HTTP: a worker records and asks,
an operator decides, only an `evidence` credential (or the sidecar's own probes, or a signed
webhook) adds provider evidence, and the actor of a decision is the credential's name.

Each reproduction of issue 12 is replayed as the attacker did it; the answer must be the safe one
and the operation's verdict must not move.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reconciler.service.credentials import Role, add_to_file, credential, new_token

from sidecar_client import H, Sidecar, assert_problem, running_sidecar

pytestmark = pytest.mark.usefixtures("no_internal_errors")

TOKENS = {role: new_token() for role in Role}
CREDENTIALS = tuple(credential(f"{role.value}-1", [role.value], TOKENS[role], "test")
                    for role in Role)


@pytest.fixture
def fleet(store_url: str) -> Iterator[Sidecar]:
    with running_sidecar(store_url, credentials=CREDENTIALS) as sidecar:
        yield sidecar


def as_role(sidecar: Sidecar, role: Role) -> httpx.Client:
    return httpx.Client(base_url=sidecar.url, timeout=30,
                        headers={"Authorization": f"Bearer {TOKENS[role]}"})


def timed_out(worker: httpx.Client, op: str) -> None:
    """An operation whose only attempt timed out: nothing is known."""
    assert worker.post("/v1/operations", json={
        "operation_id": op, "request_hash": H, "idempotency_key": f"key-{op}",
        "provider": "pay", "action": "charge", "effect": "non_idempotent"}).status_code == 201
    assert worker.post(f"/v1/operations/{op}/attempts", json={
        "attempt": 1, "idempotency_key": f"key-{op}", "request_hash": H,
        "outcome": "timeout"}).status_code == 201


ZERO = {"kind": "observation", "probe": "forged", "authority": "authoritative"}


def test_a_worker_cannot_post_provider_evidence(fleet: Sidecar) -> None:
    with as_role(fleet, Role.WORKER) as worker:
        timed_out(worker, "op-1")
        problem = assert_problem(worker.post("/v1/operations/op-1/evidence", json=ZERO),
                                 403, "forbidden")
        assert problem["required_role"] == "evidence"
        for ref in ("ch_1", "ch_2"):  # two invented lagging refs: a "duplicate" to refund
            assert worker.post("/v1/operations/op-1/evidence", json={
                "kind": "observation", "probe": "forged", "authority": "lagging",
                "matches": [{"provider_ref": ref}]}).status_code == 403
        retry = worker.post("/v1/operations/op-1/retry", json={
            "idempotency_key": "key-op-1", "request_hash": H}).json()
        assert (retry["allowed"], retry["verdict"]) == (False, "indeterminate")
        assert worker.get("/v1/operations/op-1").json()["evidence"] == []


def test_a_worker_cannot_resolve_or_approve_its_own_retry(fleet: Sidecar) -> None:
    with as_role(fleet, Role.WORKER) as worker:
        timed_out(worker, "op-1")
        for action, body in (("resolution", {"verdict": "verified_not_applied",
                                             "actor": "ops@example.com"}),
                             ("approval", {"actor": "ops@example.com"})):
            problem = assert_problem(worker.post(f"/v1/operations/op-1/{action}", json=body),
                                     403, "forbidden")
            assert problem["required_role"] == "operator"
            assert "operator" in problem["detail"]
        assert worker.get("/v1/operations/op-1").json()["verdict"] == "indeterminate"


def test_the_evidence_role_adds_provider_evidence_and_nothing_else(fleet: Sidecar) -> None:
    with as_role(fleet, Role.WORKER) as worker, as_role(fleet, Role.EVIDENCE) as lookup:
        timed_out(worker, "op-1")
        out = lookup.post("/v1/operations/op-1/evidence", json=ZERO)
        assert out.status_code == 201 and out.json()["verdict"] == "verified_not_applied"
        assert lookup.post("/v1/operations/op-1/attempts", json={
            "attempt": 2, "idempotency_key": "key-op-1", "request_hash": H,
            "outcome": "timeout"}).json()["required_role"] == "worker"
        assert lookup.post("/v1/operations/op-1/resolution", json={
            "verdict": "verified_applied"}).status_code == 403


def test_the_actor_of_a_decision_is_the_credentials_name(fleet: Sidecar) -> None:
    with as_role(fleet, Role.WORKER) as worker, as_role(fleet, Role.OPERATOR) as ops:
        timed_out(worker, "op-1")
        out = ops.post("/v1/operations/op-1/resolution", json={
            "verdict": "verified_not_applied", "actor": "somebody-else", "note": "checked"})
        assert out.status_code == 201
        [resolution] = out.json()["evidence"]
        assert resolution["actor"] == "operator-1"
        approval = ops.post("/v1/operations/op-1/approval", json={}).json()["evidence"][-1]
        assert (approval["kind"], approval["actor"]) == ("approval", "operator-1")
        # An operator also does a worker's work.
        assert ops.get("/v1/operations/op-1").status_code == 200


def test_an_unsigned_webhook_is_refused_and_changes_nothing(fleet: Sidecar) -> None:
    with as_role(fleet, Role.WORKER) as worker:
        timed_out(worker, "op-1")
        forged = {"operation_id": "op-1", "provider_ref": "ch_forged", "request_hash": H}
        # The project's own callback body is no evidence from anyone (the signed routes
        # refuse a bad signature with 401: tests/test_webhooks_*.py); a bearer changes nothing.
        assert_problem(httpx.post(fleet.url + "/v1/webhooks/pay", json=forged), 401,
                       "unauthorized")
        assert_problem(worker.post("/v1/webhooks/pay", json=forged), 410, "webhook-route-gone")
        assert worker.get("/v1/operations/op-1").json()["verdict"] == "indeterminate"


def test_an_unknown_token_is_401_and_a_known_one_needs_no_role_to_read_health(
        fleet: Sidecar) -> None:
    unknown = httpx.get(fleet.url + "/v1/operations",
                        headers={"Authorization": "Bearer " + new_token()})
    assert_problem(unknown, 401, "unauthorized")
    assert httpx.get(fleet.url + "/healthz").status_code == 200
    with as_role(fleet, Role.EVIDENCE) as lookup:
        assert lookup.get("/readyz").status_code == 200


def test_runs_decisions_need_an_operator(fleet: Sidecar) -> None:
    with as_role(fleet, Role.WORKER) as worker, as_role(fleet, Role.OPERATOR) as ops:
        for action, body in (("approve", {"resume_token": "t", "decision": "applied"}),
                             ("reject", {"resume_token": "t"}), ("cancel", {}),
                             ("resume", {})):
            problem = assert_problem(worker.post(f"/v1/runs/run-1/{action}", json=body), 403,
                                     "forbidden")
            assert problem["required_role"] == "operator"
            # The operator gets past the role check (no agent is configured here).
            assert_problem(ops.post(f"/v1/runs/run-1/{action}", json=body), 404, "no-agent")
        assert_problem(worker.post("/v1/runs", json={"input": "x"}), 404, "no-agent")
    with as_role(fleet, Role.EVIDENCE) as lookup:
        assert lookup.post("/v1/runs", json={"input": "x"}).json()["required_role"] == "worker"


def test_credentials_file_holds_hashes_only_and_is_private(tmp_path: Path,
                                                           store_url: str) -> None:
    path = tmp_path / "credentials.json"
    token = add_to_file(path, "ops-alice", ["operator"])
    assert path.stat().st_mode & 0o777 == 0o600
    assert token not in path.read_text()
    [entry] = json.loads(path.read_text())["credentials"]
    assert (entry["name"], entry["roles"]) == ("ops-alice", ["operator"])
    with running_sidecar(store_url, credentials_file=path) as sidecar:
        ok = httpx.get(sidecar.url + "/v1/operations",
                       headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200
        assert httpx.get(sidecar.url + "/v1/operations").status_code == 401


def test_loopback_mode_refuses_a_foreign_host_or_origin(sidecar: Sidecar) -> None:
    """DNS rebinding: a page at evil.example resolved to 127.0.0.1 reaches the port, but its
    requests name its own host."""
    rebound = httpx.get(sidecar.url + "/v1/operations", headers={"Host": "evil.example"})
    assert_problem(rebound, 421, "unknown-host")
    cross = httpx.post(sidecar.url + "/v1/operations", json={},
                       headers={"Origin": "http://evil.example"})
    assert_problem(cross, 403, "cross-origin")
    same = httpx.get(sidecar.url + "/v1/operations", headers={"Origin": sidecar.url})
    assert same.status_code == 200
