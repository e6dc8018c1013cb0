"""The Anthropic SDK's tool runner with `reconciled` tools, against the local fake of the
Messages API (tests/anthropic_fake.py, scripted answers, no network): a tool call that times
out, and the model's retry of it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from anthropic import Anthropic
from anthropic.lib.tools import beta_tool

from reconciler.integrations.anthropic import reconciled
from reconciler.integrations.tool_calls import ToolEffects

from anthropic_fake import KEY, FakeAnthropic, running_fake
from effect_harness import Provider, charge_tool


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with running_fake() as handle:
        yield handle


def tool_use(call_id: str) -> dict[str, object]:
    return {"type": "tool_use", "id": call_id, "name": "charge",
            "input": {"order": "A-17", "amount": 1200}}


def run_agent(fake: FakeAnthropic, provider: Provider, effects: ToolEffects,
              run_id: str) -> list[str]:
    charged = charge_tool(provider)

    @beta_tool
    def charge(order: str, amount: int) -> str:
        """Charge the customer for an order."""
        # A tool result here is text (or content blocks), not a dict.
        return json.dumps(charged(order, amount))

    # The model asks for the charge, and again (a new tool_use id) after the first answer.
    fake.reply([tool_use("toolu_1")], stop_reason="tool_use")
    fake.reply([tool_use("toolu_2")], stop_reason="tool_use")
    fake.reply([{"type": "text", "text": "finished"}])
    # This SDK version sends the key as a bearer token; the fake checks x-api-key.
    client = Anthropic(api_key=KEY, base_url=fake.url, max_retries=0,
                       default_headers={"x-api-key": KEY})
    runner = client.beta.messages.tool_runner(
        model="claude-test", max_tokens=256, thread=False,  # the fake keeps no threads
        messages=[{"role": "user", "content": "charge order A-17"}],
        tools=[reconciled(charge, effects, scope=run_id)])
    runner.until_done()
    return [str(block.get("content")) for r in fake.requests
            for message in r.body["messages"] if isinstance(message["content"], list)
            for block in message["content"] if block.get("type") == "tool_result"][-2:]


def test_a_timed_out_charge_the_provider_applied_is_not_sent_again(
        fake: FakeAnthropic, provider: Provider, effects: ToolEffects) -> None:
    provider.faults = ["lose_response"]
    first, second = run_agent(fake, provider, effects, "run-1")
    assert "charge: done (ch_1)" in first and "Do not call charge again" in first
    assert "charge: done (ch_1)" in second
    assert (provider.calls, len(provider.charges)) == (1, 1)


def test_a_timed_out_charge_the_provider_did_not_apply_is_retried_once(
        fake: FakeAnthropic, provider: Provider, effects: ToolEffects) -> None:
    provider.faults = ["fail_before_commit"]
    first, second = run_agent(fake, provider, effects, "run-2")
    assert "You may call charge again, once" in first
    assert '"id": "ch_1"' in second
    assert (provider.calls, len(provider.charges)) == (2, 1)
