"""What a call's request carried to the provider, as `@effect` and the adapters record it (SPEC
section 3, *correlation*): an idempotency key only when the call sends one, the operation id
when the call attaches it where the provider keeps metadata, and a warning, once, for a call
that carries nothing a probe can find it by. End to end against the sandbox provider: a keyless
tool call whose answer is lost is never sent again (SPEC rule 6), one charge at the provider."""

from __future__ import annotations

import logging
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from reconciler.client.effects import Recorder
from reconciler.core.domain import Carried, ProviderContract, Verdict
from reconciler.core.schemas import OperationOut
from reconciler.effect import current_call, effect
from reconciler.integrations.tool_calls import ToolEffects, ToolOutcome, tool_operation
from reconciler.testing.patience import PATIENCE_S

from effect_harness import PROVIDER, Provider

sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
from sandbox_charge import Payments, World, sandbox_world

# The probes read the providers' credentials from the environment (the sandbox checks them).
pytestmark = pytest.mark.usefixtures("sandbox_credentials")

ORDER = {"order": "A-17", "amount": 1200}


def recorded(recorder: Recorder, operation_id: str) -> OperationOut:
    return recorder.reconcile(operation_id)


def carries(operation: OperationOut) -> set[Carried]:
    return set(operation.intent.carries or ())


def charging(provider: Provider, sent: list[dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A tool that sends what its call gives it: the key (None unless the tool is `keyed`) and
    the operation id for the provider's metadata."""
    def charge(order: str, amount: int) -> dict[str, Any]:
        call = current_call()
        assert call is not None
        sent.append({"key": call.intent.idempotency_key,
                     "metadata": {"operation_id": call.operation_id}})
        return provider.charge(call.operation_id, amount)
    return charge


def run_tool(effects: ToolEffects, provider: Provider, sent: list[dict[str, Any]]) -> str:
    """One call of the tool `charge` in run `run-1`; its operation id."""
    effects.run("run-1", "charge", ORDER, lambda: charging(provider, sent)(**ORDER))
    return tool_operation("run-1", "charge", ORDER)


@pytest.mark.parametrize(("keyed", "carried"), [
    pytest.param(frozenset(), {Carried.OPERATION_ID}, id="sends-no-key-records-no-key"),
    pytest.param({"charge"}, {Carried.OPERATION_ID, Carried.IDEMPOTENCY_KEY},
                 id="keyed-is-given-the-key-and-records-it")])
def test_an_adapter_tool_records_a_key_only_when_it_sends_one(
        recorder: Recorder, provider: Provider, keyed: frozenset[str],
        carried: set[Carried]) -> None:
    """Before: every adapter intent recorded key=operation_id, sent or not."""
    sent: list[dict[str, Any]] = []
    operation_id = run_tool(ToolEffects(PROVIDER, backend=recorder, keyed=keyed,
                                        tagged={"charge"}), provider, sent)
    operation = recorded(recorder, operation_id)
    key = operation_id if keyed else None
    assert operation.intent.idempotency_key == key == sent[0]["key"]
    assert carries(operation) == carried


def test_a_tool_declaring_operation_id_tagging_is_given_the_id_and_carries_it(
        recorder: Recorder, provider: Provider) -> None:
    sent: list[dict[str, Any]] = []
    operation_id = run_tool(ToolEffects(PROVIDER, backend=recorder, tagged={"charge"}),
                            provider, sent)
    assert sent == [{"key": None, "metadata": {"operation_id": operation_id}}]
    assert provider.charges == [(operation_id, "ch_1")]
    assert carries(recorded(recorder, operation_id)) == {Carried.OPERATION_ID}


def test_effect_with_a_key_records_that_it_carries_the_idempotency_key(
        recorder: Recorder, provider: Provider) -> None:
    @effect(provider=PROVIDER, action="charge", key=lambda order: f"order-{order}",
            backend=recorder)
    def charge(order: str) -> dict[str, Any]:
        return provider.charge(f"order-{order}", 1200)

    charge("1")
    assert carries(recorded(recorder, "order-1")) == {Carried.IDEMPOTENCY_KEY}


def test_effect_tagged_without_a_key_carries_the_operation_id_alone(
        recorder: Recorder, provider: Provider) -> None:
    @effect(provider=PROVIDER, action="charge", operation_id="op-tagged", tagged=True,
            backend=recorder)
    def charge() -> dict[str, Any]:
        call = current_call()
        assert call is not None
        return provider.charge(call.operation_id, 1200)

    charge()
    operation = recorded(recorder, "op-tagged")
    assert operation.intent.idempotency_key is None
    assert carries(operation) == {Carried.OPERATION_ID}
    assert provider.charges == [("op-tagged", "ch_1")]


def test_a_call_that_carries_nothing_a_probe_can_find_is_warned_about_once_per_action(
        recorder: Recorder, provider: Provider, caplog: pytest.LogCaptureFixture) -> None:
    suffix = uuid.uuid4().hex[:8]  # once per process: each run warns of its own actions

    def untraceable(action: str) -> Callable[[str], Any]:
        action = f"{action}_{suffix}"

        @effect(provider=PROVIDER, action=action, operation_id=lambda n: f"{action}-{n}",
                backend=recorder)
        def send(n: str) -> dict[str, Any]:
            return provider.charge(f"{action}-{n}", 1)
        return send

    caplog.set_level(logging.WARNING, logger="reconciler.effect")
    for n in ("1", "2", "3"):
        untraceable("untraceable_notify")(n)
    untraceable("untraceable_page")("1")
    warned = [r.getMessage() for r in caplog.records if r.name == "reconciler.effect"]
    assert len(warned) == 2
    assert all("no probe can verify its effects" in w for w in warned)
    assert "untraceable_notify" in warned[0] and "untraceable_page" in warned[1]
    assert carries(recorded(recorder, f"untraceable_notify_{suffix}-1")) == set()


def test_a_keyed_or_tagged_call_is_not_warned_about(
        recorder: Recorder, provider: Provider, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="reconciler.effect")
    run_tool(ToolEffects(PROVIDER, backend=recorder, keyed={"charge"}), provider, [])
    assert not [r for r in caplog.records if r.name == "reconciler.effect"]


# End to end: the sandbox's Stripe API and the examples' probes (examples/reconciler.toml).
#: A provider contract under which a zero read 1 s after the send is conclusive (no in-flight
#: time): only what the request carried keeps the retry from being granted.
PROMPT = ProviderContract("stripe", idempotency_keys=True, visibility_lag_s=0.0,
                          inflight_s=0.0)


def untagged(payments: Payments) -> Callable[[str, int], dict[str, Any]]:
    """A charge tool that sends no key and no operation id: nothing a probe can find it by."""
    def charge(order: str, amount: int) -> dict[str, Any]:
        return payments.send({"amount": amount, "currency": "eur", "confirm": True,
                              "payment_method": "pm_card_visa"}, None)
    return charge


def charges_settled(world: World, hold_s: float) -> list[str]:
    """The charges once the held request has committed (`hold_s` after its send; waited for,
    as a loaded machine takes longer), and `hold_s` more: a second send, had there been one,
    would have been sent after the first and would have committed by then too."""
    deadline = time.monotonic() + PATIENCE_S
    while not world.charges() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(hold_s)
    return world.charges()


@pytest.mark.parametrize("tagged", [False, True], ids=["untagged", "tagged"])
def test_a_keyless_tool_call_that_timed_out_is_never_sent_again(tagged: bool) -> None:
    """The field trial: the sandbox commits 1.5 s after the call, the client gives up at 1.0 s,
    and a probe reads zero before the commit. Before, the intent recorded key=operation_id:
    the zero opened a retry, and the provider charged twice."""
    with sandbox_world(None, contracts=[PROMPT]) as world:
        payments = replace(world.payments, faults=["delay=1.5"], keyed=False)
        tool = payments.charge if tagged else untagged(payments)
        effects = replace(world.effects, keyed=frozenset(),
                          tagged={"charge"} if tagged else frozenset())
        told = [effects.run("run-1", "charge", ORDER, lambda: tool("A-17", 1200))
                for _ in range(2)]
        charges = charges_settled(world, 1.5)
    assert len(charges) == 1, told
    assert all(isinstance(t, ToolOutcome) for t in told), told
    first, second = (str(t) for t in told)
    assert "You may call charge again" not in first and "Do not call charge again" in first
    assert second.startswith("charge: not sent") and "Do not call charge again" in second
    assert isinstance(told[1], ToolOutcome) and told[1].verdict is not Verdict.VERIFIED_APPLIED
