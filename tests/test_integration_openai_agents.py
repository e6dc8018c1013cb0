"""The OpenAI Agents SDK with `reconciled_tool`, driven by the SDK's own `ScriptedModel`
(agents.testing, no network): a tool call that times out, and the model's retry of it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

from reconciler.core.domain import Resolution, Verdict
from reconciler.effect.backends import EmbeddedBackend
from reconciler.integrations.openai_agents import reconciled_tool
from reconciler.integrations.tool_calls import ToolEffects, tool_operation

from effect_harness import CONTRACT, PROVIDER, Provider, charge_tool

#: No traces exported: the tests make no network call.
OFFLINE = RunConfig(tracing_disabled=True)
ARGUMENTS = {"order": "A-17", "amount": 1200}


def charging_twice() -> ScriptedModel:
    """The model asks for the charge, and again (a new call id) after the first answer."""
    return ScriptedModel([[function_call("charge", ARGUMENTS, call_id="call-1")],
                          [function_call("charge", ARGUMENTS, call_id="call-2")],
                          [assistant_message("finished")]])


def run_agent(provider: Provider, effects: ToolEffects, run_id: str) -> list[str]:
    tool = reconciled_tool(function_tool(charge_tool(provider)), effects)
    agent = Agent(name="billing", model=charging_twice(), tools=[tool])
    result = Runner.run_sync(agent, "charge order A-17", context={"run_id": run_id},
                             run_config=OFFLINE)
    return [str(item.output) for item in result.new_items if isinstance(item, ToolCallOutputItem)]


def test_a_timed_out_charge_the_provider_applied_is_not_sent_again(
        provider: Provider, effects: ToolEffects) -> None:
    provider.faults = ["lose_response"]
    first, second = run_agent(provider, effects, "run-1")
    assert "charge: done (ch_1)" in first and "Do not call charge again" in first
    assert "charge: done (ch_1)" in second
    assert (provider.calls, len(provider.charges)) == (1, 1)


def test_a_timed_out_charge_the_provider_did_not_apply_is_retried_once(
        provider: Provider, effects: ToolEffects) -> None:
    provider.faults = ["fail_before_commit"]
    first, second = run_agent(provider, effects, "run-2")
    assert "You may call charge again, once" in first
    assert "'id': 'ch_1'" in second
    assert (provider.calls, len(provider.charges)) == (2, 1)


def test_an_error_the_provider_answered_is_told_with_the_verdict(
        effects: ToolEffects) -> None:
    class Declined(Exception):
        http_status = 402

    @function_tool
    def charge(order: str, amount: int) -> str:
        """Charge the customer for an order."""
        raise Declined("card declined")

    model = ScriptedModel([[function_call("charge", {"order": "B", "amount": 1},
                                          call_id="c")], [assistant_message("ok")]])
    agent = Agent(name="billing", model=model,
                  tools=[reconciled_tool(charge, effects)])
    result = Runner.run_sync(agent, "charge", context={"run_id": "run-3"},
                             run_config=OFFLINE)
    [output] = [i.output for i in result.new_items if isinstance(i, ToolCallOutputItem)]
    assert "the provider answered with an error (Declined: card declined)" in str(output)
    assert "Please try again" not in str(output)


def test_a_repeat_only_a_human_can_settle_pauses_for_approval(tmp_path: Path) -> None:
    """No probe can see the provider: after the lost answer the verdict stays indeterminate,
    so the model's retry waits for a human (the SDK's approval), who settles it."""
    provider = Provider(faults=["lose_response"])
    with EmbeddedBackend(f"sqlite:///{tmp_path / 'r.db'}", contracts=[CONTRACT]) as store:
        effects = ToolEffects(PROVIDER, backend=store, keyed={"charge"})
        agent = Agent(name="billing", model=charging_twice(), tools=[
            reconciled_tool(function_tool(charge_tool(provider)), effects, approvals=True)])
        paused = Runner.run_sync(agent, "charge order A-17", context={"run_id": "run-4"},
                                 run_config=OFFLINE)
        [waiting] = paused.interruptions
        assert waiting.tool_name == "charge" and provider.calls == 1

        operation_id = tool_operation("run-4", "charge", ARGUMENTS)
        store.ledger.record_evidence(Resolution(operation_id, datetime.now(UTC),
                                                Verdict.VERIFIED_APPLIED, "ops@example.com"))
        state = paused.to_state()
        state.approve(waiting)
        resumed = Runner.run_sync(agent, state, run_config=OFFLINE)
    outputs = [str(i.output) for i in resumed.new_items if isinstance(i, ToolCallOutputItem)]
    assert "charge: done" in outputs[-1]
    assert (provider.calls, len(provider.charges)) == (1, 1)
