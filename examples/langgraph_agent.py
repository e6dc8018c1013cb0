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
from sandbox_charge import ARGUMENTS, Report, report, sandbox_world

from reconciler.integrations.langchain import ReconcilerMiddleware


class ScriptedModel(GenericFakeChatModel):
    """The fake model, taking tools as a chat model does (it calls them by its script)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self


def charge_call(call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[
        {"name": "charge", "id": call_id, "type": "tool_call", "args": ARGUMENTS}])


def main(fault: str | None) -> Report:
    with sandbox_world(fault) as world:
        model = ScriptedModel(messages=iter([charge_call("call-1"), charge_call("call-2"),
                                             AIMessage(content="finished")]))
        agent = create_agent(model, tools=[tool(world.payments.charge)],
                             middleware=[ReconcilerMiddleware(world.effects)])
        config: RunnableConfig = {"configurable": {"thread_id": "thread-langgraph"}}
        state = agent.invoke({"messages": [HumanMessage("charge order A-17")]}, config)
        return report(world, [str(m.content) for m in state["messages"]
                              if isinstance(m, ToolMessage)])


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else None))
