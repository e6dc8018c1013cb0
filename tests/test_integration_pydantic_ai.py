"""Pydantic AI with `ReconciledToolset`, driven by the framework's own `FunctionModel` (a
scripted model, no network): a tool call that times out, and the model's retry of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from effect_harness import BACKENDS, PROVIDER, Provider, backend
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

from reconciler.client.effects import Recorder
from reconciler.effect import current_call
from reconciler.integrations.pydantic_ai import ReconciledToolset
from reconciler.integrations.tool_calls import ToolEffects


@pytest.fixture
def provider() -> Provider:
    return Provider()


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, provider: Provider,
          tmp_path: Path) -> Iterator[Recorder]:
    with backend(request.param, provider, tmp_path) as b:
        yield b


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


def agent(provider: Provider, store: Recorder) -> Agent[None, str]:
    def charge(order: str, amount: int) -> dict[str, Any]:
        """Charge the customer for an order."""
        call = current_call()
        assert call is not None and call.intent.idempotency_key is not None
        return provider.charge(call.intent.idempotency_key, amount)

    toolset = ReconciledToolset(FunctionToolset([charge]),
                                effects=ToolEffects(PROVIDER, backend=store))
    return Agent(FunctionModel(retrying_model), toolsets=[toolset])


def test_a_timed_out_charge_the_provider_applied_is_not_sent_again(
        provider: Provider, store: Recorder) -> None:
    provider.faults = ["lose_response"]
    result = agent(provider, store).run_sync("charge order A-17", run_id="run-1")
    first, second = returns(result.all_messages())
    assert "charge: done (ch_1)" in first and "Do not call charge again" in first
    assert "charge: done (ch_1)" in second
    assert (provider.calls, len(provider.charges)) == (1, 1)


def test_a_timed_out_charge_the_provider_did_not_apply_is_retried_once(
        provider: Provider, store: Recorder) -> None:
    provider.faults = ["fail_before_commit"]
    result = agent(provider, store).run_sync("charge order A-17", run_id="run-2")
    first, second = returns(result.all_messages())
    assert "not done" in first and "You may call charge again, once" in first
    assert "'id': 'ch_1'" in second
    assert (provider.calls, len(provider.charges)) == (2, 1)
