"""Continuation across request deadlines: pause between steps with a task_continue_request,
go on with the matching task_continue_response, refuse a mismatched or replayed id."""

from __future__ import annotations

import pytest

from reconciler.core.errors import ContinuationError
from reconciler.core.runs.states import RunState
from reconciler.runtime.continuation import new_request_id, run_of_request
from reconciler.runtime.loop import AgentRuntime
from reconciler.runtime.scripted import call, say, tool_use
from reconciler.runtime.tools import ToolCall, ToolOutput
from reconciler.testing import ManualMonotonic

from runtime_harness import (
    FakeTool,
    World,
    lookup,
    run,
)

S = RunState




def paused(world: World, mono: ManualMonotonic) -> tuple[AgentRuntime, str, str, FakeTool]:
    """A run paused between its two tool calls: each takes 9 s, the deadline is 10 s away and
    2 s are kept in reserve. (run id, continue request id, tool)."""
    async def slow(tool_call: ToolCall) -> ToolOutput:
        mono.advance(9)
        return ToolOutput("ok")

    tool = lookup(action=slow)
    script = [call(tool_use("lookup", {"n": 1}), tool_use("lookup", {"n": 2})), say("done")]
    rt = world.runtime(script, [tool.tool])
    run_id = world.start(rt, step_reserve_s=2.0)
    advanced = run(rt.advance(run_id, deadline=mono() + 10))
    request = advanced.continue_request
    assert request is not None and advanced.view.continue_request == request.id
    assert (request.type, request.run_id, request.tool_steps) == (
        "task_continue_request", run_id, 1)
    assert advanced.view.state is S.AWAITING_TOOL and len(tool.calls) == 1
    return rt, run_id, request.id, tool


def test_a_run_near_its_deadline_pauses_and_continues_on_the_matching_id(
        world: World, mono: ManualMonotonic) -> None:
    rt, run_id, request_id, tool = paused(world, mono)
    advanced = run(rt.continue_(run_id, request_id, deadline=mono() + 100))
    assert advanced.continue_request is None
    assert (advanced.view.state, advanced.view.output) == (S.COMPLETED, "done")
    assert [c.input for c in tool.calls] == [{"n": 1}, {"n": 2}]


def test_a_paused_run_waits_for_its_continue_response(world: World, mono: ManualMonotonic) -> None:
    rt, run_id, request_id, tool = paused(world, mono)
    before = world.journal.events(run_id)
    again = run(rt.advance(run_id, deadline=mono() + 100))
    assert again.continue_request is not None and again.continue_request.id == request_id
    assert world.journal.events(run_id) == before and len(tool.calls) == 1


def test_a_mismatched_or_replayed_continue_response_is_refused(world: World,
                                                               mono: ManualMonotonic) -> None:
    rt, run_id, request_id, _ = paused(world, mono)
    before = world.journal.events(run_id)
    with pytest.raises(ContinuationError, match="does not match"):
        run(rt.continue_(run_id, "cont_other"))
    assert world.journal.events(run_id) == before
    run(rt.continue_(run_id, request_id, deadline=mono() + 100))
    with pytest.raises(ContinuationError, match="answered already"):
        run(rt.continue_(run_id, request_id))


def test_a_continue_response_without_a_pending_request_is_refused(world: World) -> None:
    rt = world.runtime([say("done")])
    run_id = world.start(rt)
    with pytest.raises(ContinuationError, match="no pending continue request"):
        run(rt.continue_(run_id, "cont_any"))


def test_a_deadline_inside_the_step_reserve_still_makes_one_step_per_request(
        world: World, mono: ManualMonotonic) -> None:
    """deadline_s <= step_reserve_s once paused before the first step, and every continue
    paused again with nothing done. Now each request makes one step, then pauses."""
    tool = lookup()
    rt = world.runtime([call(tool_use("lookup", {"n": 1})), say("done")], [tool.tool])
    run_id = world.start(rt, step_reserve_s=2.0)
    advanced = run(rt.advance(run_id, deadline=mono() + 1))
    progress = [len(world.journal.events(run_id))]
    for _ in range(5):
        if advanced.continue_request is None:
            break
        advanced = run(rt.continue_(run_id, advanced.continue_request.id,
                                    deadline=mono() + 0.5))
        progress.append(len(world.journal.events(run_id)))
    assert (advanced.view.state, advanced.view.output) == (S.COMPLETED, "done")
    assert len(tool.calls) == 1
    # Three steps (model, tool, model), one per request: two pauses, each request moved on.
    assert len(progress) == 3 and progress == sorted(set(progress))


def test_a_continue_request_id_is_seed_prefixed_and_names_its_run() -> None:
    request_id = new_request_id("run_a_1:x")
    assert request_id.startswith("continue_run_a_1:x_")
    assert run_of_request(request_id) == "run_a_1:x"
    assert run_of_request("cont_" + request_id) is None
    assert run_of_request("continue_r1_nothex") is None
    assert run_of_request("continue__" + "0" * 32) is None
