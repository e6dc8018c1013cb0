"""A LangChain agent (a LangGraph graph) whose charge tool goes through the reconciler's
middleware, offline: langchain_core's fake chat model plays the model, the sandbox provider
takes the charge.

    python examples/langgraph_agent.py lose_response        # one charge; the retry not sent
    python examples/langgraph_agent.py fail_before_commit   # one charge, on the granted retry
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from sandbox_charge import ARGUMENTS, Payments, Report, report, sandbox_world

from reconciler.integrations.langchain import ReconcilerMiddleware
from reconciler.integrations.tool_calls import ToolEffects


class ScriptedModel(GenericFakeChatModel):
    """The fake model, taking tools as a chat model does (it calls them by its script)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self


def charge_call(call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[
        {"name": "charge", "id": call_id, "type": "tool_call", "args": ARGUMENTS}])


def drive(payments: Payments, effects: ToolEffects, run_id: str) -> list[str]:
    """Run the agent on graph thread `run_id`; what its tool calls answered the model."""
    model = ScriptedModel(messages=iter([charge_call("call-1"), charge_call("call-2"),
                                         AIMessage(content="finished")]))
    agent = create_agent(model, tools=[tool(payments.charge)],
                         middleware=[ReconcilerMiddleware(effects)])
    config: RunnableConfig = {"configurable": {"thread_id": run_id}}
    state = agent.invoke({"messages": [HumanMessage("charge order A-17")]}, config)
    return [str(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]


def main(fault: str | None) -> Report:
    with sandbox_world(fault) as world:
        return report(world, drive(world.payments, world.effects, "thread-langgraph"))


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else None))
