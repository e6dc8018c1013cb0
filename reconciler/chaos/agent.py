"""The agent the chaos runs drive: the product's origin scenario against the sandbox.

One run, four turns, every effect class:

    turn 1  read the channel (read_only)  +  post "deploy finished" (non_idempotent, no key)
    turn 2  open a ticket (non_idempotent, found again by a marker in its body)
    turn 3  charge the deposit (idempotent_write, with the derived idempotency key)
    turn 4  final answer

The tools send exactly the bodies `reconciler.demo.agent.SHAPES` describe, with the operation
id in them, so the sandbox's records can be matched to operations by request hash.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import httpx

from reconciler.core.domain import Effect
from reconciler.core.hashing import canonical_json
from reconciler.core.runs.messages import ToolSpec
from reconciler.demo.agent import CHANNEL, OPERATION, SHAPES, Shape, receipt_of
from reconciler.runtime.agent import Agent
from reconciler.runtime.scripted import ScriptedModel, call, say, tool_use
from reconciler.runtime.tools import Tool, ToolCall, ToolOutput

#: The per-request patience of a tool; the sandbox answers in milliseconds.
TOOL_TIMEOUT_S = 5.0
#: Short reconcile waits: the sandbox's lagging searches settle within a second.
CONFIG: dict[str, Any] = {"reconcile_rounds": 10, "reconcile_wait_s": 0.25, "max_turns": 6}
TASK = ("Deploy is done: tell the channel, open a ticket for the flaky step, charge the "
        "deposit.")
#: Where `served` finds the sandbox (set by `reconciler chaos --supervised`).
SANDBOX_ENV = "RECONCILER_CHAOS_SANDBOX"


@dataclass(frozen=True, slots=True)
class Step:
    """One tool call of the script: the tool and the effect class it has."""

    tool: str
    effect: Effect


STEPS: tuple[Step, ...] = (
    Step("read_channel", Effect.READ_ONLY),
    Step("post_message", Effect.NON_IDEMPOTENT),
    Step("open_ticket", Effect.NON_IDEMPOTENT),
    Step("charge_deposit", Effect.IDEMPOTENT_WRITE),
)

#: Which sandbox shape each side-effecting tool sends.
SHAPE_OF: dict[str, str] = {"post_message": "chat", "open_ticket": "issues",
                            "charge_deposit": "payments"}


def script() -> ScriptedModel:
    """The model's side: the same in every worker, so a resumed run continues the script."""
    return ScriptedModel([
        call(tool_use("read_channel", {"channel": CHANNEL}),
             tool_use("post_message", {"text": "Deploy finished."})),
        call(tool_use("open_ticket", {"title": "Flaky deploy"})),
        call(tool_use("charge_deposit", {"amount": 1250, "currency": "eur"})),
        say("Posted the message, opened the ticket and charged the deposit."),
    ])


def tools(sandbox_url: str, http: httpx.AsyncClient) -> list[Tool]:
    """The tools, bound to one sandbox and one HTTP client."""

    async def read_channel(tool_call: ToolCall) -> ToolOutput:
        response = await http.get(
            f"{sandbox_url}/chat/api/conversations.history",
            params={"channel": CHANNEL, "limit": 5}, timeout=TOOL_TIMEOUT_S)
        return ToolOutput(response.text[:2000], is_error=not response.is_success,
                          status=response.status_code)

    def sender(name: str, shape: Shape) -> Tool:
        async def send(tool_call: ToolCall) -> ToolOutput:
            assert tool_call.operation_id is not None
            headers = {**shape.headers, "Content-Type": "application/json"}
            if shape.keyed:
                headers["Idempotency-Key"] = tool_call.idempotency_key
            response = await http.post(
                sandbox_url + shape.root + shape.path, headers=headers,
                content=canonical_json(shape.params(tool_call.operation_id)),
                timeout=TOOL_TIMEOUT_S)
            return ToolOutput(response.text[:2000], is_error=not response.is_success,
                              status=response.status_code, receipt=receipt_of(shape, response))

        return Tool(ToolSpec(name, f"{shape.action} at the sandbox", {"type": "object"}),
                    shape.effect, send, provider=shape.provider, action=shape.action,
                    request=lambda c: shape.params(c.operation_id or ""),
                    correlation=lambda c: shape.correlation, uses_key=shape.keyed,
                    tagged=OPERATION in repr(shape.body))  # metadata or a marker

    reader = Tool(ToolSpec("read_channel", "read the channel's latest messages",
                           {"type": "object"}), Effect.READ_ONLY, read_channel)
    return [reader, *(sender(name, SHAPES[provider]) for name, provider in SHAPE_OF.items())]


def served() -> Agent:
    """The chaos agent for `reconciler serve --agent reconciler.chaos.agent:served`, against
    the sandbox at $RECONCILER_CHAOS_SANDBOX (the supervised chaos mode's second replica)."""
    url = os.environ.get(SANDBOX_ENV)
    if not url:
        raise ValueError(f"set {SANDBOX_ENV} to the sandbox's URL")
    return Agent(script(), tools(url, httpx.AsyncClient()), config=CONFIG)
