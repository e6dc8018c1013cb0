"""An agent worker's side effect, wrapped in the reconciler's client.

Run the sandbox provider and the sidecar, then this:

    reconciler sandbox &                   # fake provider APIs on 127.0.0.1:8081
    reconciler serve --config examples/reconciler.toml &
    python examples/worker.py                                   # charged at once
    python examples/worker.py http://127.0.0.1:8765 http://127.0.0.1:8081 fail_before_commit
"""

from __future__ import annotations

import sys
import uuid

import httpx

from reconciler.client import ReconcilerClient, intent
from reconciler.errors import RetryRefusedError
from reconciler.schemas import MatchIn


def charge_customer(sidecar: str, provider: str, run_id: str, tool_call_id: str,
                    fault: str | None = None) -> str:
    """Charge 12.00 EUR once, whatever happens on the wire; returns what the worker concluded.
    `fault` asks the sandbox to misbehave on the first send (e.g. "lose_response")."""
    body = {"amount": 1200, "currency": "eur",
            "metadata": {"operation_id": f"{run_id}.{tool_call_id}"}}
    operation = intent(f"{run_id}.{tool_call_id}", provider="payments", action="charge",
                       effect="non_idempotent", params=body, run_id=run_id,
                       tool_call_id=tool_call_id, derive_key=True)
    headers = {"Idempotency-Key": operation.idempotency_key or ""}
    faults = [fault] if fault else []

    def send() -> httpx.Response:
        injected = {"X-Sandbox-Fault": faults.pop()} if faults else {}
        return httpx.post(f"{provider}/pay/v1/charges", json=body,
                          headers={**headers, **injected}, timeout=2.0)

    def receipt(response: httpx.Response) -> MatchIn | None:
        data = response.json() if response.is_success else {}
        return MatchIn(provider_ref=data["id"], request_hash=data.get("request_hash")
                       ) if "id" in data else None

    with ReconcilerClient(sidecar) as client, client.track(operation, receipt=receipt) as call:
        try:
            response = call.dispatch(send)              # attempt 1, recorded either way
            if response.is_success:
                return f"charged: {response.json()['id']}"
        except httpx.TransportError:
            pass                                        # timeout or connection error: recorded
        verdict = client.reconcile(operation.operation_id).verdict
        try:
            response = call.dispatch(send)              # a retry: only with the gate's grant
            return f"charged on retry: {response.json()['id']}"
        except RetryRefusedError as refused:
            return f"not retried ({verdict.value}): {refused.reason}"


if __name__ == "__main__":
    sidecar = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8765"
    provider = sys.argv[2] if len(sys.argv) > 2 else "http://127.0.0.1:8081"
    fault = sys.argv[3] if len(sys.argv) > 3 else None
    run_id = f"run-{uuid.uuid4().hex[:8]}"  # a fresh agent run each time this is started
    print(charge_customer(sidecar, provider, run_id=run_id, tool_call_id="call-7", fault=fault))
