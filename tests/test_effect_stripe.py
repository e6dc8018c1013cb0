"""`@effect` around the official `stripe` SDK (a non-httpx client: requests underneath), pointed
at the sandbox provider's Stripe-like API or at sockets that fail the way networks do."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stripe

from reconciler.core.domain import Outcome
from reconciler.effect import Applied, effect
from reconciler.effect.backends import EmbeddedBackend
from reconciler.sandbox import RunningSandbox, running_sandbox

# The probes read the providers' credentials from the environment (the sandbox checks them).
pytestmark = pytest.mark.usefixtures("sandbox_credentials")

EXAMPLE_CONFIG = Path(__file__).parent.parent / "examples" / "reconciler.toml"


def stripe_client(base: str, timeout_s: float = 2.0) -> Any:
    """The SDK as a user sets it up, but for the base URL; its own retries off (a blind retry
    inside the SDK is the thing the gate exists to prevent)."""
    return stripe.StripeClient("sk_test_reconciler", base_addresses={"api": base},
                               http_client=stripe.RequestsClient(timeout=timeout_s),
                               max_network_retries=0)


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[EmbeddedBackend]:
    with EmbeddedBackend(f"sqlite:///{tmp_path / 'r.db'}") as backend:
        yield backend


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def charge_with(client: Any, recorder: EmbeddedBackend, key: str,
                headers: dict[str, str] | None = None) -> Any:
    params = {"amount": 1200, "currency": "eur", "confirm": True,
              "payment_method": "pm_card_visa", "metadata": {"operation_id": key}}

    @effect(provider="stripe", action="payment_intents.create", key=key, params=params,
            backend=recorder)
    def charge() -> Any:
        return client.v1.payment_intents.create(params=params, options={
            "idempotency_key": key, **({"headers": headers} if headers else {})})
    return charge


def outcome(recorder: EmbeddedBackend, key: str) -> tuple[Outcome, int | None]:
    [attempt] = recorder.reconcile(key).attempts
    return attempt.outcome, attempt.status


def test_a_refused_connection_is_not_sent(recorder: EmbeddedBackend) -> None:
    with pytest.raises(stripe.APIConnectionError):
        charge_with(stripe_client(closed_port()), recorder, "k-refused")()
    assert outcome(recorder, "k-refused") == (Outcome.NOT_SENT, None)


def test_a_read_timeout_is_a_timeout(recorder: EmbeddedBackend, silent_server: str) -> None:
    with pytest.raises(stripe.APIConnectionError):
        charge_with(stripe_client(silent_server, timeout_s=0.3), recorder, "k-timeout")()
    assert outcome(recorder, "k-timeout") == (Outcome.TIMEOUT, None)


def test_an_error_answer_is_a_response_with_its_status(recorder: EmbeddedBackend) -> None:
    with running_sandbox() as sandbox:
        client = stripe_client(f"{sandbox.url}/pay")

        @effect(provider="payments", action="charge", key="k-400", params={},
                backend=recorder)
        def bad_charge() -> object:
            return client.v1.charges.create(params={"currency": "eur"})  # no amount

        with pytest.raises(stripe.InvalidRequestError):
            bad_charge()
    assert outcome(recorder, "k-400") == (Outcome.RESPONSE, 400)


@pytest.fixture
def sandbox() -> Iterator[RunningSandbox]:
    with running_sandbox() as handle:
        probe = stripe_client(f"{handle.url}/pay")
        try:
            probe.v1.charges.create(params={"amount": 1, "currency": "eur"})
        except stripe.InvalidRequestError as refused:
            if "JSON" in str(refused):
                pytest.skip("the sandbox takes JSON bodies only; the stripe SDK sends form "
                            f"bodies ({refused})")
            raise
        yield handle


@pytest.fixture
def probing(tmp_path: Path, sandbox: RunningSandbox) -> Iterator[EmbeddedBackend]:
    config = tmp_path / "reconciler.toml"
    config.write_text(EXAMPLE_CONFIG.read_text().replace("http://127.0.0.1:8081", sandbox.url))
    with EmbeddedBackend(f"sqlite:///{tmp_path / 'p.db'}", config=config) as backend:
        yield backend


def payment_intents(sandbox: RunningSandbox) -> list[str]:
    return [r.ref for r in sandbox.state.objects()
            if r.provider == "pay" and r.ref.startswith("pi_")]


def test_a_charge_is_recorded_with_the_sdk_objects_id(probing: EmbeddedBackend,
                                                      sandbox: RunningSandbox) -> None:
    result = charge_with(stripe_client(f"{sandbox.url}/pay"), probing, "k-ok")()
    attempt = probing.reconcile("k-ok").attempts[0]
    assert attempt.receipt is not None and attempt.receipt.provider_ref == result.id


def test_a_charge_whose_answer_was_lost_is_not_sent_again(probing: EmbeddedBackend,
                                                          sandbox: RunningSandbox) -> None:
    sandbox.state.configure(hold_s=2.0)
    lost = charge_with(stripe_client(f"{sandbox.url}/pay", timeout_s=0.5), probing, "k-lost",
                       {"X-Sandbox-Fault": "lose_response"})
    with pytest.raises(stripe.APIConnectionError):
        lost()
    again = charge_with(stripe_client(f"{sandbox.url}/pay"), probing, "k-lost")()
    assert isinstance(again, Applied)
    assert payment_intents(sandbox) == [again.provider_ref]
