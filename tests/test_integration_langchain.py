"""A LangChain agent (`create_agent`, a LangGraph graph underneath) with `ReconcilerMiddleware`,
driven by langchain_core's own fake chat model (no network): a tool call that times out, and
the model's retry of it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from reconciler.integrations.langchain import ReconcilerMiddleware
from reconciler.integrations.tool_calls import ToolEffects

from effect_harness import Provider, charge_tool


class ScriptedModel(GenericFakeChatModel):
    """The fake model, taking tools as a real chat model does (it calls them by its script)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self


def charge_call(call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": "charge", "id": call_id, "type":
                                              "tool_call",
                                              "args": {"order": "A-17", "amount": 1200}}])


def run_agent(provider: Provider, effects: ToolEffects, thread: str) -> list[ToolMessage]:
    # The model asks for the charge, and again (a new tool call id) after the first answer.
    model = ScriptedModel(messages=iter([charge_call("call-1"), charge_call("call-2"),
                                         AIMessage(content="finished")]))
    agent = create_agent(model, tools=[tool(charge_tool(provider))],
                         middleware=[ReconcilerMiddleware(effects)])
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    state = agent.invoke({"messages": [HumanMessage("charge order A-17")]}, config)
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def test_a_tool_node_with_the_gate_answers_a_repeat_from_the_record(
        provider: Provider, effects: ToolEffects) -> None:
    """A hand-built LangGraph graph: the gate as the ToolNode's own tool-call wrapper."""
    provider.faults = ["lose_response"]
    gate = ReconcilerMiddleware(effects)
    node = ToolNode([tool(charge_tool(provider))], wrap_tool_call=gate.wrap_tool_call)
    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    app = graph.compile()
    config: RunnableConfig = {"configurable": {"thread_id": "thread-3"}}
    answers = [app.invoke({"messages": [charge_call(f"call-{n}")]}, config)["messages"][-1]
               for n in (1, 2)]
    assert all("charge: done (ch_1)" in str(a.content) for a in answers)
    assert (provider.calls, len(provider.charges)) == (1, 1)


def test_a_timed_out_charge_the_provider_applied_is_not_sent_again(
        provider: Provider, effects: ToolEffects) -> None:
    provider.faults = ["lose_response"]
    first, second = run_agent(provider, effects, "thread-1")
    assert "charge: done (ch_1)" in str(first.content)
    assert "Do not call charge again" in str(first.content)
    assert "charge: done (ch_1)" in str(second.content)
    assert (provider.calls, len(provider.charges)) == (1, 1)


def test_a_timed_out_charge_the_provider_did_not_apply_is_retried_once(
        provider: Provider, effects: ToolEffects) -> None:
    provider.faults = ["fail_before_commit"]
    first, second = run_agent(provider, effects, "thread-2")
    assert "You may call charge again, once" in str(first.content)
    assert "ch_1" in str(second.content) and second.status == "success"
    assert (provider.calls, len(provider.charges)) == (2, 1)
