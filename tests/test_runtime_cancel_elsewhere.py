"""A cancel sent to another worker (another replica) than the one advancing the run: it is
stored in the run's journal as a cancel request, the advancing worker sees it while its call is
in flight, stops the call (the handler's signal fires) and records the cancellation."""

from __future__ import annotations

import asyncio

from reconciler.core.runs.events import EventKind
from reconciler.core.runs.states import RunState
from reconciler.runtime.loop import AgentRuntime
from reconciler.runtime.scripted import ScriptedModel, call, say, tool_use
from reconciler.runtime.tools import Tool, ToolCall, ToolOutput

from runtime_harness import DEADLINE_S, TEST_CONFIG, World, lookup, run


def replica(world: World, tools: list[Tool], holder: str) -> AgentRuntime:
    script = [call(tool_use("lookup", {"q": 1})), say("done")]
    return AgentRuntime(world.journal, world.ledger, world.gate, ScriptedModel(script), tools,
                        world.reconcile, holder=holder)


def test_a_cancel_on_another_replica_stops_the_call_in_flight(world: World) -> None:
    entered, signalled = asyncio.Event(), []

    async def hang(tool_call: ToolCall) -> ToolOutput:
        entered.set()
        try:
            await asyncio.sleep(DEADLINE_S * 2)
        finally:
            signalled.append(tool_call.cancel.reason)
        return ToolOutput("too late")

    tools = [lookup(action=hang).tool]
    a, b = replica(world, tools, "replica-a"), replica(world, tools, "replica-b")
    run_id = a.create("task", config=TEST_CONFIG).run_id

    async def scenario() -> None:
        advancing = asyncio.ensure_future(a.advance(run_id))
        await asyncio.wait_for(entered.wait(), 10)
        view = await b.cancel(run_id, "stopped from replica b", wait_s=10)
        assert view.state is RunState.CANCELLED
        assert (await advancing).view.state is RunState.CANCELLED

    run(scenario())
    view = world.journal.load(run_id)
    kinds = [e.kind for e in world.journal.events(run_id)]
    assert signalled == ["stopped from replica b"]
    assert EventKind.CANCEL_REQUESTED in kinds and kinds[-1] is EventKind.CANCELLED
    assert view.cancellation is not None
    assert view.cancellation["reason"] == "stopped from replica b"
    assert view.cancel_requested is None and view.pending_calls() == []


def test_a_cancel_of_a_run_nobody_advances_is_recorded_at_once(world: World) -> None:
    b = replica(world, [lookup().tool], "replica-b")
    run_id = b.create("task", config=TEST_CONFIG).run_id
    view = run(b.cancel(run_id, "never mind"))
    assert view.state is RunState.CANCELLED
    assert EventKind.CANCEL_REQUESTED not in [e.kind for e in world.journal.events(run_id)]
