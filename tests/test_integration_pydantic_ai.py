"""Pydantic AI with `ReconciledToolset`, driven by the framework's own `FunctionModel` (a
scripted model, no network): a tool call that times out, and the model's retry of it."""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from reconciler.integrations.pydantic_ai import ReconciledToolset
from reconciler.integrations.tool_calls import ToolEffects

from effect_harness import Provider, charge_tool


def returns(messages: list[ModelMessage]) -> list[str]:
    return [str(part.content) for m in messages if isinstance(m, ModelRequest)
            for part in m.parts if isinstance(part, ToolReturnPart)]


def retrying_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Asks for the charge, and asks again (a new tool call id) after the first answer, as a
    model told "try again" by a blind retry middleware would."""
    seen = returns(messages)
    if len(seen) < 2:
        return ModelResponse(parts=[ToolCallPart("charge", {"order": "A-17", "amount": 1200},
                                                 tool_call_id=f"call-{len(seen) + 1}")])
    return ModelResponse(parts=[TextPart(" | ".join(seen))])


def agent(provider: Provider, effects: ToolEffects) -> Agent[None, str]:
    toolset = ReconciledToolset(FunctionToolset([charge_tool(provider)]), effects=effects)
    return Agent(FunctionModel(retrying_model), toolsets=[toolset])


def test_a_timed_out_charge_the_provider_applied_is_not_sent_again(
        provider: Provider, effects: ToolEffects) -> None:
    provider.faults = ["lose_response"]
    result = agent(provider, effects).run_sync("charge order A-17", run_id="run-1")
    first, second = returns(result.all_messages())
    assert "charge: done (ch_1)" in first and "Do not call charge again" in first
    assert "charge: done (ch_1)" in second
    assert (provider.calls, len(provider.charges)) == (1, 1)


def test_a_timed_out_charge_the_provider_did_not_apply_is_retried_once(
        provider: Provider, effects: ToolEffects) -> None:
    provider.faults = ["fail_before_commit"]
    result = agent(provider, effects).run_sync("charge order A-17", run_id="run-2")
    first, second = returns(result.all_messages())
    assert "not done" in first and "You may call charge again, once" in first
    assert "'id': 'ch_1'" in second
    assert (provider.calls, len(provider.charges)) == (2, 1)
