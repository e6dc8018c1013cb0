"""The Python client around a real side effect: a worker that follows it records the intent and
every attempt, and cannot send a retry the gate refused. Over real HTTP: the sidecar under
uvicorn, the sandbox provider, both on loopback."""

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from reconciler.client import AsyncReconcilerClient, ReconcilerClient, intent
from reconciler.core.domain import Carried, Effect, Outcome, Verdict
from reconciler.core.errors import RetryRefusedError, ServiceError, UnknownOperationError
from reconciler.core.schemas import AttemptOut, IntentIn, MatchIn
from reconciler.sandbox import RunningSandbox, running_sandbox
from reconciler.sandbox.credentials import SANDBOX_CREDENTIALS
from reconciler.service.app import create_app
from reconciler.service.settings import Settings

from service_harness import serving

# The probes read the providers' credentials from the environment (the sandbox checks them).
pytestmark = pytest.mark.usefixtures("sandbox_credentials")


@pytest.fixture(scope="module")
def sandbox() -> Iterator[RunningSandbox]:
    with running_sandbox() as handle:
        handle.state.configure(hold_s=2.0)
        yield handle


@pytest.fixture
def sidecar(tmp_path: Path, sandbox: RunningSandbox) -> Iterator[str]:
    config = tmp_path / "reconciler.toml"
    config.write_text(f"""
[providers.payments]
idempotency_keys = true
visibility_lag_s = 1
inflight_s = 0
[[providers.payments.probes]]
use = "stripe.charges.list"
actions = ["charge"]
base_url = "{sandbox.url}/pay"
tries = 1
""")
    settings = Settings(db=f"sqlite:///{tmp_path / 'r.db'}", sweep_interval_s=0, config=config)
    with serving(create_app(settings)) as url:
        yield url


def charge(sandbox: RunningSandbox, op: str, fault: str | None = None,
           key: str | None = None, timeout: float = 5.0
           ) -> tuple[dict[str, object], Callable[[], httpx.Response]]:
    """A charge body and a `send` that posts it to the sandbox (with a fault, if given)."""
    body = {"amount": 1200, "currency": "eur", "metadata": {"operation_id": op}}
    headers = {"Idempotency-Key": key or f"key-{op}", **SANDBOX_CREDENTIALS["pay"]}
    if fault:
        headers["X-Sandbox-Fault"] = fault

    def send() -> httpx.Response:
        return httpx.post(f"{sandbox.url}/pay/v1/charges", json=body, headers=headers,
                          timeout=timeout)
    return body, send


def charges_made(sandbox: RunningSandbox, op: str) -> int:
    objects = httpx.get(f"{sandbox.url}/_sandbox/objects").json()["objects"]
    return sum(1 for o in objects if o["provider"] == "pay"
               and o["data"].get("metadata", {}).get("operation_id") == op)


def payment(op: str, body: object) -> IntentIn:
    # The body tags the charge with the operation id and the key goes with it: the intent says
    # so, or the probe's empty read of it would prove nothing (SPEC section 3).
    return intent(op, provider="payments", action="charge", effect=Effect.NON_IDEMPOTENT,
                  params=body, idempotency_key=f"key-{op}").model_copy(
        update={"carries": [Carried.IDEMPOTENCY_KEY, Carried.OPERATION_ID]})


def test_a_tracked_call_records_the_intent_and_the_response(sidecar: str,
                                                           sandbox: RunningSandbox) -> None:
    body, send = charge(sandbox, "c-ok")
    with ReconcilerClient(sidecar) as client, client.track(payment("c-ok", body)) as effect:
        assert effect.dispatch(send).status_code == 200
        [attempt] = client.get("c-ok").attempts
    assert (attempt.attempt, attempt.outcome, attempt.status) == (1, Outcome.RESPONSE, 200)


def test_a_timeout_is_recorded_and_raised(sidecar: str, sandbox: RunningSandbox) -> None:
    body, send = charge(sandbox, "c-lost", fault="lose_response", timeout=0.3)
    with ReconcilerClient(sidecar) as client, client.track(payment("c-lost", body)) as effect:
        with pytest.raises(httpx.ReadTimeout):
            effect.dispatch(send)
        [attempt] = client.get("c-lost").attempts
    assert attempt.outcome is Outcome.TIMEOUT


def test_a_retry_the_gate_refuses_is_never_sent(sidecar: str, sandbox: RunningSandbox) -> None:
    body, send = charge(sandbox, "c-refused", fault="lose_response", timeout=0.3)
    with ReconcilerClient(sidecar) as client, \
            client.track(payment("c-refused", body)) as effect:
        with pytest.raises(httpx.ReadTimeout):
            effect.dispatch(send)
        operation = client.reconcile("c-refused")  # the key record shows the charge
        assert operation.verdict is Verdict.VERIFIED_APPLIED
        with pytest.raises(RetryRefusedError, match="verified_applied"):
            effect.dispatch(send)
        assert len(client.get("c-refused").attempts) == 1
    assert charges_made(sandbox, "c-refused") == 1


def test_a_granted_retry_is_sent_once_and_recorded(sidecar: str,
                                                  sandbox: RunningSandbox) -> None:
    body, fail = charge(sandbox, "c-granted", fault="fail_before_commit")
    _, send = charge(sandbox, "c-granted")
    with ReconcilerClient(sidecar) as client, \
            client.track(payment("c-granted", body)) as effect:
        assert effect.dispatch(fail).status_code == 503
        assert client.reconcile("c-granted").verdict is Verdict.VERIFIED_NOT_APPLIED
        assert effect.dispatch(send).status_code == 200
        assert effect.last_answer is not None and effect.last_answer.allowed
        assert [a.attempt for a in client.get("c-granted").attempts] == [1, 2]
    assert charges_made(sandbox, "c-granted") == 1


def test_a_worker_restarted_after_a_crash_asks_the_gate_before_its_first_send(
        sidecar: str, sandbox: RunningSandbox) -> None:
    body, send = charge(sandbox, "c-crash", fault="lose_response", timeout=0.3)
    with ReconcilerClient(sidecar) as client:
        with client.track(payment("c-crash", body)) as effect, pytest.raises(httpx.ReadTimeout):
            effect.dispatch(send)
        # The worker dies here and comes back with the same operation id.
        with client.track(payment("c-crash", body)) as resumed:
            assert resumed.resumed and resumed.attempts == 1
            with pytest.raises(RetryRefusedError):
                resumed.dispatch(charge(sandbox, "c-crash")[1])
    assert charges_made(sandbox, "c-crash") == 1


def test_the_async_client_tracks_the_same_way(sidecar: str, sandbox: RunningSandbox) -> None:
    body = {"amount": 5, "currency": "eur", "metadata": {"operation_id": "c-async"}}

    async def run() -> list[AttemptOut]:
        async with AsyncReconcilerClient(sidecar) as client, httpx.AsyncClient() as http:
            async with client.track(payment("c-async", body),
                                    receipt=lambda r: MatchIn(provider_ref=r.json()["id"])
                                    ) as effect:
                await effect.dispatch(lambda: http.post(
                    f"{sandbox.url}/pay/v1/charges", json=body,
                    headers={"Idempotency-Key": "key-c-async", **SANDBOX_CREDENTIALS["pay"]}))
            return list((await client.get("c-async")).attempts)

    [attempt] = asyncio.run(run())
    assert attempt.status == 200 and attempt.receipt is not None


def test_an_unknown_operation_is_a_clear_error(sidecar: str) -> None:
    with ReconcilerClient(sidecar) as client, pytest.raises(UnknownOperationError):
        client.get("never-recorded")


def test_a_conflicting_intent_is_a_service_error_with_the_problem(sidecar: str) -> None:
    with ReconcilerClient(sidecar) as client:
        client.record_intent(payment("c-conflict", {"amount": 1}))
        with pytest.raises(ServiceError) as err:
            client.record_intent(payment("c-conflict", {"amount": 2}))
    assert err.value.status == 409 and "intent-conflict" in str(err.value.problem["type"])
