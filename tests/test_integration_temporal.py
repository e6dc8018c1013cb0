"""Temporal: an activity through the gate (reconciler.integrations.temporal), run by temporalio's
own `ActivityEnvironment` (no server), attempt after attempt as Temporal's retry policy would
run it: the attempt number, the heartbeats and the cancellation are the environment's. The
charge is the examples' PaymentIntent at the sandbox; an embedded store probes it
(examples/reconciler.toml). Counted at the sandbox: the charges for the activity's order."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput

from reconciler.core.hashing import request_hash
from reconciler.effect import Applied, current_call
from reconciler.effect.backends import EmbeddedBackend
from reconciler.integrations.durable import engine_operation
from reconciler.integrations.temporal import (
    REFUSED,
    ActivityEffect,
    ReconciledActivities,
    activity_operation,
)
from reconciler.sandbox import RunningSandbox

from kill_harness import sandbox_config

sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
from sandbox_charge import Payments, charge_body
from worker_log import untagged

AMOUNT = 1200
#: A well-formed Stripe secret key: the sandbox checks its form, as Stripe would its value.
SANDBOX_KEY = {"Authorization": "Bearer sk_test_sandbox"}


def replayed(applied: Applied) -> dict[str, Any]:
    return {"id": applied.provider_ref, "replayed": True}


@dataclass
class Charges:
    """A charge activity's world: the sandbox, the store, the sends made."""

    sandbox: RunningSandbox
    store: EmbeddedBackend
    order: str = field(default_factory=lambda: f"A-{uuid.uuid4().hex[:8]}")
    workflow_id: str = field(default_factory=lambda: f"wf-{uuid.uuid4().hex[:8]}")
    sends: int = 0
    faults: list[str] = field(default_factory=list)

    def body(self, keyed: bool, operation_id: str = "") -> dict[str, Any]:
        sent = charge_body(operation_id, {"order": self.order, "amount": AMOUNT})
        return sent if keyed else untagged(sent)

    def effect(self, keyed: bool) -> ActivityEffect:
        """Keyed: the operation id as Idempotency-Key and in the metadata; else neither."""
        return ActivityEffect(
            "stripe", action="payment_intents.create", keyed=keyed, tagged=keyed,
            backend=self.store, replay=replayed,
            params=lambda order: self.body(keyed, activity_operation()))

    def charge_sync(self, order: str) -> dict[str, Any]:
        """The activity: one PaymentIntent, sent as its intent says."""
        call = current_call()
        assert call is not None and order == self.order
        self.sends += 1
        payments = Payments(self.sandbox.url, self.faults, keyed=True,
                            http=httpx.Client(timeout=5.0, headers=SANDBOX_KEY))
        keyed = call.intent.idempotency_key is not None
        return payments.send(self.body(keyed, call.operation_id), call.intent.idempotency_key)

    async def charge(self, order: str) -> dict[str, Any]:
        """The same activity, async (as most are)."""
        return await asyncio.to_thread(self.charge_sync, order)  # current_call() goes along

    def at_provider(self, keyed: bool) -> list[str]:
        operation = engine_operation("temporal", self.workflow_id, "1") if keyed else ""
        wanted = request_hash(self.body(keyed, operation))
        return [r.ref for r in self.sandbox.state.objects() if r.request_hash == wanted]

    def environment(self, attempt: int) -> ActivityEnvironment:
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, workflow_id=self.workflow_id, activity_id="1",
                                       activity_type="charge", attempt=attempt)
        return env

    def attempt(self, n: int, keyed: bool = True) -> Any:
        """Attempt `n` of the activity, decorated."""
        activity = self.effect(keyed).wrap(self.charge, "charge")
        return asyncio.run(self.environment(n).run(activity, self.order))


@pytest.fixture
def charges(sandbox: RunningSandbox, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Charges]:
    monkeypatch.setenv("STRIPE_SECRET_KEY", "sk_test_sandbox")  # what the probes send
    with EmbeddedBackend(f"sqlite:///{tmp_path / 'receipts.db'}",
                         config=sandbox_config(sandbox, tmp_path)) as store:
        yield Charges(sandbox, store)


def test_attempt_two_of_an_activity_that_failed_before_the_provider_committed_sends_under_a_grant(
        charges: Charges) -> None:
    charges.faults.append("fail_before_commit")
    # verified_not_applied: the provider's error is raised as it is, and Temporal may retry.
    with pytest.raises(httpx.HTTPStatusError):
        charges.attempt(1)
    result = charges.attempt(2)
    assert charges.sends == 2
    assert charges.at_provider(keyed=True) == [result["id"]]


def test_a_sync_activity_is_gated_alike(charges: Charges) -> None:
    charges.faults.append("fail_before_commit")
    activity = charges.effect(keyed=True).wrap(charges.charge_sync, "charge")
    with pytest.raises(httpx.HTTPStatusError):
        charges.environment(1).run(activity, charges.order)
    result = charges.environment(2).run(activity, charges.order)
    assert charges.sends == 2
    assert charges.at_provider(keyed=True) == [result["id"]]


def test_an_activity_cancelled_while_the_provider_held_it_is_answered_from_the_provider(
        charges: Charges) -> None:
    charges.faults.append("delay=1.0")
    env = charges.environment(1)
    activity = charges.effect(keyed=True).wrap(charges.charge, "charge")

    async def cancelled_mid_send() -> None:
        running = asyncio.ensure_future(env.run(activity, charges.order))
        deadline = time.monotonic() + 10
        while charges.sends == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        env.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(cancelled_mid_send())
    deadline = time.monotonic() + 10  # the held request commits after the cancellation
    while not charges.at_provider(keyed=True) and time.monotonic() < deadline:
        time.sleep(0.05)
    answer = charges.attempt(2)
    assert charges.sends == 1  # attempt 2 asked the gate: verified_applied, nothing sent
    assert answer == {"id": charges.at_provider(keyed=True)[0], "replayed": True}


def test_a_doubtful_activity_fails_non_retryable_with_its_verdict(charges: Charges) -> None:
    charges.faults.append("error_after_commit")
    with pytest.raises(ApplicationError) as failed:
        charges.attempt(1, keyed=False)
    assert failed.value.non_retryable and failed.value.type == REFUSED
    assert failed.value.details[0]["verdict"] == "indeterminate"
    # A later attempt (a retry policy that ignores the error type, a reset) asks the gate.
    with pytest.raises(ApplicationError) as refused:
        charges.attempt(2, keyed=False)
    assert refused.value.non_retryable
    assert refused.value.details[0]["verdict"] == "indeterminate"
    assert charges.sends == 1
    assert len(charges.at_provider(keyed=False)) == 1


def test_heartbeats_carry_the_operation_id_and_no_argument(charges: Charges) -> None:
    beats: list[tuple[Any, ...]] = []
    env = charges.environment(1)
    env.on_heartbeat = lambda *details: beats.append(details)
    asyncio.run(env.run(charges.effect(keyed=True).wrap(charges.charge, "charge"),
                        charges.order))
    assert beats == [(engine_operation("temporal", charges.workflow_id, "1"),)]
    assert charges.order not in repr(beats)


class Runs(ActivityInboundInterceptor):
    """The end of the interceptor chain as a worker's: it calls the activity function."""

    def __init__(self) -> None:
        pass

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        return await input.fn(*input.args)


def through_interceptor(charges: Charges, attempt: int,
                        fn: Callable[[str], Awaitable[Any]], kind: str) -> Any:
    interceptor = ReconciledActivities({"charge": charges.effect(keyed=True)})
    chain = interceptor.intercept_activity(Runs())
    env = charges.environment(attempt)
    env.info = dataclasses.replace(env.info, activity_type=kind)

    async def execute() -> Any:
        return await chain.execute_activity(ExecuteActivityInput(fn, [charges.order], None, {}))

    return asyncio.run(env.run(execute))


def test_a_worker_interceptor_gates_the_activities_it_names(charges: Charges) -> None:
    charges.faults.append("error_after_commit")
    # The provider committed and answered 500: the reconcile shows it done.
    answer = through_interceptor(charges, 1, charges.charge, "charge")
    assert answer == {"id": charges.at_provider(keyed=True)[0], "replayed": True}
    assert through_interceptor(charges, 2, charges.charge, "charge") == answer
    assert charges.sends == 1


def test_a_worker_interceptor_leaves_other_activities_alone(charges: Charges) -> None:
    async def lookup(order: str) -> str:
        assert current_call() is None  # not an effect: no intent, no gate
        return f"looked up {order}"

    assert through_interceptor(charges, 1, lookup, "lookup") == f"looked up {charges.order}"


def test_the_docs_example_is_the_example_that_runs_and_charges_once() -> None:
    page = (Path(__file__).parent.parent / "docs" / "integrations" / "temporal.md").read_text()
    shown = page.split("```python", 1)[1].split("\n", 1)[1].split("```", 1)[0]
    example = Path(__file__).parent.parent / "examples" / "temporal_charge.py"
    assert shown in example.read_text()
    temporal_charge = importlib.import_module("temporal_charge")
    applied = temporal_charge.main("error_after_commit")
    assert applied.answers == [f"attempt 1: {applied.charges[0]} (replayed)"]
    granted = temporal_charge.main("fail_before_commit")
    assert granted.answers == ["attempt 1: HTTPStatusError",
                               f"attempt 2: {granted.charges[0]}"]
