"""Short run leases, heartbeated: a worker renews its lease while it advances a run, so no one
else takes the run over however long a step takes; a worker that died stops renewing, and its
run may be taken over once the lease has passed."""

from __future__ import annotations

import asyncio
import time

import pytest

from reconciler.core.errors import RunConflictError
from reconciler.core.runs.states import RunState
from reconciler.ledger import Ledger
from reconciler.runtime.loop import AgentRuntime
from reconciler.runtime.scripted import ScriptedModel, call, say, tool_use
from reconciler.runtime.tools import Tool, ToolCall, ToolOutput

from runtime_harness import TEST_CONFIG, World, lookup, run

LEASE_S = 0.3


def worker(world: World, tools: list[Tool], holder: str) -> AgentRuntime:
    # The real clock: leases are about wall time.
    script = [call(tool_use("lookup", {"q": 1})), say("done")]
    return AgentRuntime(world.journal, Ledger(world.store), world.gate, ScriptedModel(script),
                        tools, world.reconcile, holder=holder, lease_s=LEASE_S)


def test_a_worker_keeps_its_lease_through_a_step_longer_than_the_lease(world: World) -> None:
    async def slow(tool_call: ToolCall) -> ToolOutput:
        await asyncio.sleep(LEASE_S * 4)
        return ToolOutput("found")

    tools = [lookup(action=slow).tool]
    a, b = worker(world, tools, "a"), worker(world, tools, "b")
    run_id = a.create("task", config=TEST_CONFIG).run_id

    async def scenario() -> RunState:
        advancing = asyncio.ensure_future(a.advance(run_id))
        await asyncio.sleep(LEASE_S * 2.5)  # past the first lease: only a renewal keeps it
        with pytest.raises(RunConflictError, match="lease"):
            await b.advance(run_id)
        return (await advancing).view.state

    assert run(scenario()) is RunState.COMPLETED


def test_a_dead_workers_lease_lapses_and_another_takes_the_run(world: World) -> None:
    b = worker(world, [lookup().tool], "b")
    run_id = b.create("task", config=TEST_CONFIG).run_id
    now = Ledger(world.store).clock()
    assert world.journal.claim(run_id, "dead-worker", now, LEASE_S)  # and then it died
    with pytest.raises(RunConflictError, match="lease"):
        run(b.advance(run_id))
    time.sleep(LEASE_S * 1.5)
    assert run(b.advance(run_id)).view.state is RunState.COMPLETED
