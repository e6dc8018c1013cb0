"""The Anthropic SDK's tool runner with a reconciled charge tool, offline: the SDK talks to a
scripted Messages API through its own httpx client (a mock transport, no network), and the
sandbox provider takes the charge.

    python examples/anthropic_agent.py lose_response        # one charge; the retry not sent
    python examples/anthropic_agent.py fail_before_commit   # one charge, on the granted retry
"""

from __future__ import annotations

import json
import sys
from typing import Any

import httpx2  # the HTTP client this SDK version is built on
from anthropic import Anthropic
from anthropic.lib.tools import beta_tool
from sandbox_charge import ARGUMENTS, Payments, Report, report, sandbox_world

from reconciler.integrations.anthropic import reconciled
from reconciler.integrations.tool_calls import ToolEffects


def scripted_messages_api(results: list[str]) -> httpx2.MockTransport:
    """POST /v1/messages: asks for the charge twice (new tool_use ids), then ends; keeps the
    tool results it is sent."""
    turns = iter(["toolu_1", "toolu_2", None])

    def answer(request: httpx2.Request) -> httpx2.Response:
        sent = json.loads(request.content)["messages"][-1]["content"]
        if isinstance(sent, list):
            results.extend(str(b["content"]) for b in sent if b.get("type") == "tool_result")
        call_id = next(turns)
        content: list[dict[str, Any]] = [
            {"type": "tool_use", "id": call_id, "name": "charge", "input": ARGUMENTS}
            if call_id else {"type": "text", "text": "finished"}]
        return httpx2.Response(200, json={
            "id": f"msg_{call_id}", "type": "message", "role": "assistant", "model": "scripted",
            "content": content, "stop_reason": "tool_use" if call_id else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}})

    return httpx2.MockTransport(answer)


def drive(payments: Payments, effects: ToolEffects, run_id: str) -> list[str]:
    """Run the tool loop as run `run_id`; what its tool calls answered the model."""
    @beta_tool
    def charge(order: str, amount: int) -> str:
        """Charge the customer for an order."""
        return json.dumps(payments.charge(order, amount))

    results: list[str] = []
    client = Anthropic(api_key="offline", max_retries=0,
                       http_client=httpx2.Client(transport=scripted_messages_api(results)))
    client.beta.messages.tool_runner(
        model="scripted", max_tokens=256, thread=False,
        messages=[{"role": "user", "content": "charge order A-17"}],
        tools=[reconciled(charge, effects, scope=run_id)]).until_done()
    return results


def main(fault: str | None) -> Report:
    with sandbox_world(fault) as world:
        return report(world, drive(world.payments, world.effects, "run-anthropic"))


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else None))
