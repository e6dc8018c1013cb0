"""End to end over HTTP, sidecar and sandbox provider on loopback: a human's "applied" stands
through a provider read outage (SPEC section 4, amended).

    attempt 1 fails ── /reconcile: authoritative zero ── human: "applied, do not charge again"
      ── provider reads go down ── /reconcile: unavailable ── /retry: refused, verified_applied

Before the amendment the unavailable read superseded the human, the verdict fell back to the
older zero, and the gate granted a retry: the charge was sent again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reconciler.core.hashing import derive_idempotency_key, request_hash
from reconciler.sandbox import RunningSandbox, running_sandbox
from reconciler.service.app import create_app
from reconciler.service.settings import Settings
from reconciler.testing.patience import PATIENCE_S

from service_harness import serving

# The probes read the providers' credentials from the environment (the sandbox checks them).
pytestmark = pytest.mark.usefixtures("sandbox_credentials")

CONFIG = Path(__file__).parent.parent / "examples" / "reconciler.toml"


@pytest.fixture
def sandbox() -> Iterator[RunningSandbox]:
    with running_sandbox() as handle:
        yield handle


@pytest.fixture
def sidecar(tmp_path: Path, sandbox: RunningSandbox) -> Iterator[httpx.Client]:
    """The example configuration (stripe_like probes) aimed at this sandbox, no lag."""
    config = tmp_path / "reconciler.toml"
    config.write_text(CONFIG.read_text().replace("http://127.0.0.1:8081", sandbox.url))
    settings = Settings(db=f"sqlite:///{tmp_path / 'r.db'}", sweep_interval_s=0, config=config)
    with serving(create_app(settings)) as url, httpx.Client(base_url=url, timeout=PATIENCE_S,
                                                             trust_env=False) as http:
        yield http


def ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


def test_a_human_applied_survives_a_read_outage_and_no_retry_is_granted(
        sidecar: httpx.Client, sandbox: RunningSandbox) -> None:
    op, run_id, call_id = "run-h.call-1", "run-h", "call-1"
    params = {"amount": 1200, "currency": "eur", "confirm": True,
              "payment_method": "pm_card_visa", "metadata": {"operation_id": op}}
    key, hash_ = derive_idempotency_key(run_id, call_id), request_hash(params)
    ok(sidecar.post("/v1/operations", json={
        "operation_id": op, "request_hash": hash_, "idempotency_key": key,
        "provider": "stripe", "action": "payment_intents.create", "effect": "non_idempotent",
        "run_id": run_id, "tool_call_id": call_id,
        # The request sends the key and tags the PaymentIntent with the operation id, which
        # the example's probes find it by (SPEC section 3).
        "carries": ["idempotency_key", "operation_id"]}), 201)
    with httpx.Client(base_url=sandbox.url, trust_env=False) as provider:
        sent = provider.post("/pay/v1/payment_intents", json=params, headers={
            "Idempotency-Key": key, "X-Sandbox-Fault": "fail_before_commit"})
        assert sent.is_error
        ok(sidecar.post(f"/v1/operations/{op}/attempts", json={
            "attempt": 1, "idempotency_key": key, "request_hash": hash_,
            "outcome": "response", "status": sent.status_code}), 201)

        zero = ok(sidecar.post(f"/v1/operations/{op}/reconcile"))
        assert (zero["verdict"], zero["next_action"]) == ("verified_not_applied",
                                                          "retry_same_key")
        human = ok(sidecar.post(f"/v1/operations/{op}/resolution", json={
            "verdict": "verified_applied", "actor": "ops@example.com",
            "note": "on the customer's statement; do not charge again"}), 201)
        assert human["verdict"] == "verified_applied" and not human["retry_allowed"]

        ok(provider.post("/_sandbox/config", json={"read_unavailable": True}))
        outage = ok(sidecar.post(f"/v1/operations/{op}/reconcile"))
        retry = ok(sidecar.post(f"/v1/operations/{op}/retry", json={
            "idempotency_key": key, "request_hash": hash_, "holder": "worker-1"}))
        objects = ok(provider.get("/_sandbox/objects"))["objects"]

    assert outage["evidence"][-1]["authority"] == "unavailable"
    assert outage["verdict"] == "verified_applied"
    assert {"human_resolution", "probe_unavailable"} <= set(outage["findings"])
    assert (retry["allowed"], retry["verdict"]) == (False, "verified_applied")
    assert objects == []
