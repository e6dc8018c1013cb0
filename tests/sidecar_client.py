"""Driving the sidecar's HTTP surface (SPEC section 6) in tests: a client with terse calls for
each endpoint (`Sidecar`), the sidecar served in a thread over a fresh store (`running_sidecar`),
a probe that finds nothing (`zero_probe`), and the check of a problem answer (`assert_problem`).

The `store_url`, `sidecar` and `no_internal_errors` fixtures are in conftest.py.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from probes.base import Probe, ProbeTarget
from reconciler.core.domain import Authority, Carried, Observation, ProviderContract
from reconciler.core.hashing import request_hash
from reconciler.core.sight import Sight
from reconciler.ledger import Ledger
from reconciler.service import Settings, create_app
from reconciler.store.schema import open_store
from reconciler.store.sql import SqlStore
from reconciler.testing import FakeProbe

from service_harness import serving

PROBLEMS = "https://reconciler.dev/problems/"
H = request_hash({"amount": 100, "currency": "eur"})
OTHER_H = request_hash({"amount": 200, "currency": "eur"})
CONTRACTS = (
    ProviderContract("pay", idempotency_keys=True, visibility_lag_s=0, inflight_s=0,
                     max_attempts=3),
    ProviderContract("fragile", idempotency_keys=True, visibility_lag_s=0, inflight_s=0,
                     compensable=False),
    ProviderContract("slow", idempotency_keys=True, reconcile_deadline_s=0),
)
TOKEN = "test-token-" + uuid.uuid4().hex


#: Where `charge` operations' effects appear, by any identifier a request carries.
SEES_CHARGES = Sight(frozenset({"charge"}), frozenset(Carried))


def zero_probe(delay_s: float = 0.0, sight: Sight = SEES_CHARGES) -> FakeProbe:
    """The kit's fake probe, answering an authoritative read that finds nothing after
    `delay_s` (`wait_for_call` returns once a call has begun)."""
    def zero(target: ProbeTarget) -> Observation:
        time.sleep(delay_s)
        return Observation(target.operation_id, datetime.now(UTC), "zero",
                           Authority.AUTHORITATIVE)
    return FakeProbe(answer=zero, name="zero", sight=sight)


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


def post_as_a_client(http: httpx.Client, path: str, body: Any) -> httpx.Response:
    """POST as the project's clients do: a 503 `overloaded` is sent again when its Retry-After
    says (bounded), so a test of many concurrent callers is not failed by the admission bound."""
    for _ in range(30):
        response = http.post(path, json=body)
        if response.status_code != 503:
            break
        time.sleep(float(response.headers["retry-after"]))
    return response


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


def assert_problem(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert problem["type"] == PROBLEMS + kind
    assert problem["status"] == status
    assert problem["title"] and problem["detail"] and problem["instance"]
    return problem
