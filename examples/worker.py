"""An agent worker's side effect, made through Stripe's official SDK and wrapped in the
reconciler's client.

Run the sandbox provider and the sidecar, then this (the sandbox speaks Stripe's API, so the
SDK is unchanged but for its base URL; leave STRIPE_API_BASE unset and set a real
STRIPE_SECRET_KEY to charge in Stripe's test mode instead):

    reconciler sandbox &                   # fake provider APIs on 127.0.0.1:8081
    reconciler serve --config examples/reconciler.toml &
    python examples/worker.py                                   # charged at once
    python examples/worker.py http://127.0.0.1:8765 http://127.0.0.1:8081/pay fail_before_commit

The operation id goes into the PaymentIntent's `metadata[operation_id]`, which is how the
`stripe.payment_intents.*` probes find it again (probes/recipes/stripe.py), and the request hash
into `metadata[request_hash]`, which binds what they find to this request (docs/probes.md). The
intent says so (`carries`), and that the idempotency key it records is the one sent.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from typing import Any

import httpx
import stripe
from stripe.params import PaymentIntentCreateParams

from reconciler.client import ReconcilerClient, intent
from reconciler.core.domain import Verdict
from reconciler.core.errors import RetryRefusedError, ServiceError
from reconciler.core.schemas import MatchIn
from reconciler.core.verdicts import NextAction

SANDBOX_STRIPE = "http://127.0.0.1:8081/pay"
#: How long the worker waits for a doubtful send to be decided (the provider may still be
#: applying it for its `inflight_s`), probing every POLL_S, before it leaves it to a human.
PATIENCE_S, POLL_S = 30.0, 1.0


def decided(sidecar: ReconcilerClient, operation_id: str) -> Verdict:
    """Ask the sidecar to probe until the verdict no longer says to wait (SPEC section 4: a
    zero read while the provider may still be applying the request proves nothing), or
    PATIENCE_S has passed; the verdict then."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        try:
            standing = sidecar.reconcile(operation_id)
            if standing.next_action != NextAction.RECONCILE:
                return standing.verdict
        except ServiceError as exc:  # 409: the sweep is probing it right now
            if exc.status != 409:
                raise
        if time.monotonic() >= deadline:
            return sidecar.get(operation_id).verdict
        time.sleep(POLL_S)


def stripe_client(api_base: str | None) -> stripe.StripeClient:
    """The official client; no retries of its own: a retry is the gate's to grant."""
    return stripe.StripeClient(
        os.environ.get("STRIPE_SECRET_KEY", "sk_test_sandbox"),
        base_addresses={"api": api_base} if api_base else {},
        http_client=stripe.HTTPXClient(timeout=2.0, allow_sync_methods=True),
        max_network_retries=0)


def charge_customer(sidecar: str, api_base: str | None, run_id: str, tool_call_id: str,
                    fault: str | None = None) -> str:
    """Charge 12.00 EUR once, whatever happens on the wire; returns what the worker concluded.
    `fault` asks the sandbox to misbehave on the first send (e.g. "lose_response")."""
    operation_id = f"{run_id}.{tool_call_id}"
    params: dict[str, Any] = {"amount": 1200, "currency": "eur", "confirm": True,
                              "payment_method": "pm_card_visa",
                              "metadata": {"operation_id": operation_id}}
    operation = intent(operation_id, provider="stripe", action="payment_intents.create",
                       effect="idempotent_write", params=params, run_id=run_id,
                       tool_call_id=tool_call_id, derive_key=True,
                       carries=["operation_id", "idempotency_key"])
    # The hash of the parameters above, attached so a probe's match is bound to this request.
    sent: PaymentIntentCreateParams = {
        "amount": 1200, "currency": "eur", "confirm": True, "payment_method": "pm_card_visa",
        "metadata": {**params["metadata"], "request_hash": operation.request_hash}}
    client = stripe_client(api_base)
    faults = [fault] if fault else []

    def send() -> httpx.Response:
        headers = {"X-Sandbox-Fault": faults.pop()} if faults else {}
        try:
            created = client.v1.payment_intents.create(
                sent, options={"idempotency_key": operation.idempotency_key or "",
                               "headers": headers})
            answer = created.last_response
        except stripe.APIConnectionError as exc:
            # The SDK wraps the transport failure; the tracker reads httpx's own exceptions.
            cause = exc.__cause__
            raise cause if isinstance(cause, httpx.TransportError) else exc from None
        except stripe.StripeError as exc:
            if not exc.http_body or exc.http_status is None:
                raise
            answer = stripe.StripeResponse(exc.http_body, exc.http_status, exc.headers or {})
        assert answer is not None
        return httpx.Response(answer.code, content=answer.body.encode(),
                              headers=dict(answer.headers))

    def receipt(response: httpx.Response) -> MatchIn | None:
        data = response.json() if response.is_success else {}
        bound = data.get("metadata", {}).get("request_hash") if "id" in data else None
        return MatchIn(provider_ref=data["id"], request_hash=bound) if "id" in data else None

    with ReconcilerClient(sidecar) as sidecar_client, \
            sidecar_client.track(operation, receipt=receipt) as call:
        try:
            response = call.dispatch(send)              # attempt 1, recorded either way
            if response.is_success:
                return f"charged: {response.json()['id']}"
        except httpx.TransportError:
            pass                                        # timeout or connection error: recorded
        verdict = decided(sidecar_client, operation.operation_id)
        try:
            response = call.dispatch(send)              # a retry: only with the gate's grant
            return f"charged on retry: {response.json()['id']}"
        except RetryRefusedError as refused:
            return f"not retried ({verdict.value}): {refused.reason}"


if __name__ == "__main__":
    sidecar = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8765"
    api_base = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("STRIPE_API_BASE",
                                                                    SANDBOX_STRIPE)
    fault = sys.argv[3] if len(sys.argv) > 3 else None
    run_id = f"run-{uuid.uuid4().hex[:8]}"  # a fresh agent run each time this is started
    print(charge_customer(sidecar, api_base, run_id=run_id, tool_call_id="call-7", fault=fault))
