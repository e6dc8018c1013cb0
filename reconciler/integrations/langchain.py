"""LangChain agents and LangGraph: an agent middleware (`AgentMiddleware.wrap_tool_call`, the
hook langchain's own `ToolRetryMiddleware` uses to retry blindly) that puts every tool call
through the gate instead, and `reconciled_tools` for a LangGraph `ToolNode`.

    agent = create_agent(model, tools=[charge], middleware=[ReconcilerMiddleware(effects)])

    gate = ReconcilerMiddleware(effects)               # a hand-built LangGraph graph
    graph.add_node("tools", ToolNode(tools, wrap_tool_call=gate.wrap_tool_call,
                                     awrap_tool_call=gate.awrap_tool_call))

The scope of a call is the graph's `thread_id` (its checkpointer's key: a resumed thread makes
the same operations), else the run's id.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from reconciler.core.outcomes import read_result
from reconciler.core.schemas import MatchIn
from reconciler.integrations.tool_calls import ToolEffects, ToolOutcome

Result = ToolMessage | Command[Any]


def thread_scope(request: ToolCallRequest) -> str:
    """The graph thread a tool call runs in (`configurable.thread_id`), else its run id."""
    config = getattr(request.runtime, "config", None) or {}
    configurable = config.get("configurable") or {}
    return str(configurable.get("thread_id") or config.get("run_id") or "langgraph")


def tool_message_receipt(result: Any) -> MatchIn | None:
    """The provider's reference in a tool's answer: its artifact, or its content as JSON."""
    if not isinstance(result, ToolMessage):
        return None
    if result.artifact is not None:
        return read_result(result.artifact).receipt
    try:
        return read_result(json.loads(str(result.content))).receipt
    except ValueError:
        return None


class ReconcilerMiddleware(AgentMiddleware):
    """Every tool call an effect of `effects`; a refusal or a lost answer reaches the model as
    a ToolMessage that says what happened and what not to do."""

    def __init__(self, effects: ToolEffects,
                 scope: Callable[[ToolCallRequest], str] = thread_scope) -> None:
        super().__init__()
        self.effects = effects if effects.receipt else _with_receipt(effects)
        self.scope = scope

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], Result]) -> Result:
        call = request.tool_call
        result = self.effects.run(self.scope(request), call["name"], call["args"],
                                  lambda: handler(request))
        return _message(result, call["id"]) if isinstance(result, ToolOutcome) else result

    async def awrap_tool_call(self, request: ToolCallRequest,
                              handler: Callable[[ToolCallRequest], Awaitable[Result]],
                              ) -> Result:
        call = request.tool_call

        async def invoke() -> Result:
            return await handler(request)

        result = await self.effects.arun(self.scope(request), call["name"], call["args"],
                                         invoke)
        return _message(result, call["id"]) if isinstance(result, ToolOutcome) else result


def _with_receipt(effects: ToolEffects) -> ToolEffects:
    return replace(effects, receipt=tool_message_receipt)


def _message(outcome: ToolOutcome, tool_call_id: str | None) -> ToolMessage:
    return ToolMessage(content=outcome.message, tool_call_id=tool_call_id or "",
                       name=outcome.tool, status="error" if outcome.final else "success")
