"""Cancellation: pending calls get synthetic results, calls in flight (a child process
included) are stopped, and a cancelled run resumes cleanly."""

from __future__ import annotations

import asyncio
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from reconciler.core.domain import Effect, Outcome
from reconciler.core.errors import IllegalTransitionError
from reconciler.core.runs.events import RunView
from reconciler.core.runs.messages import ModelRequest, ModelResponse
from reconciler.core.runs.states import RunState
from reconciler.runtime.cancel import CancelSignal, settle
from reconciler.runtime.loop import AgentRuntime
from reconciler.runtime.processes import run_process
from reconciler.runtime.scripted import call, say, tool_use
from reconciler.runtime.tools import ToolCall, ToolOutput, operation_id
from reconciler.testing import ManualMonotonic

from runtime_harness import (
    DEADLINE_S,
    FIRST,
    FakeTool,
    World,
    first_call,
    gone,
    group_gone,
    lookup,
    run,
    script_for,
    send,
)

S = RunState



async def cancel_once(rt: AgentRuntime, run_id: str, started: asyncio.Event,
                      reason: str) -> RunView:
    """Advance the run, cancel it once `started` is set, and return where that left it."""
    advancing = asyncio.ensure_future(rt.advance(run_id))
    waiting = asyncio.ensure_future(started.wait())
    await asyncio.wait({advancing, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    assert not advancing.done(), "the run ended before it could be cancelled"
    view = await rt.cancel(run_id, reason)
    assert (await advancing).view == view
    return view


def test_a_run_cancelled_mid_tool_answers_its_pending_calls_and_resumes(world: World) -> None:
    started = asyncio.Event()

    async def slow(tool_call: ToolCall) -> ToolOutput:
        started.set()
        await asyncio.sleep(DEADLINE_S * 2)
        return ToolOutput("too late")

    tools = [lookup(action=slow), send()]
    script = [call(tool_use("lookup", {"q": 1}), tool_use("send", {"to": "bob"})), say("done")]
    rt = world.runtime(script, [t.tool for t in tools])
    view = run(cancel_once(rt, world.start(rt), started, "user pressed stop"))
    assert view.state is S.CANCELLED and view.pending_calls() == []
    assert [(c.result_source, c.result.is_error if c.result else None)
            for c in view.calls.values()] == [("cancelled", True), ("cancelled", True)]
    assert view.cancellation is not None and view.cancellation["reason"] == "user pressed stop"
    assert len(tools[1].calls) == 0
    resumed = run(world.runtime(script, [t.tool for t in tools]).resume(view.run_id)).view
    assert (resumed.state, resumed.output) == (S.COMPLETED, "done")


def test_a_write_cancelled_in_flight_is_left_to_the_reconciler(world: World) -> None:
    started = asyncio.Event()

    async def hangs(tool_call: ToolCall) -> ToolOutput:
        started.set()
        await asyncio.sleep(DEADLINE_S * 2)
        return ToolOutput("too late")

    tool = send(action=hangs)
    rt = world.runtime(script_for(tool), [tool.tool])
    view = run(cancel_once(rt, world.start(rt), started, "shutdown"))
    op = operation_id(view.run_id, FIRST)
    result = first_call(view).result
    assert result is not None and f"Operation {op} is being reconciled" in result.content
    assert [(a.number, a.outcome) for a in world.store.facts(op).attempts] == [
        (1, Outcome.TIMEOUT)]


def test_a_run_cancelled_mid_model_call_is_cancelled(world: World) -> None:
    started = asyncio.Event()

    class HangingModel:
        async def complete(self, request: ModelRequest) -> ModelResponse:
            started.set()
            await asyncio.sleep(DEADLINE_S * 2)
            return say("too late")

    rt = AgentRuntime(world.journal, world.ledger, world.gate, HangingModel(), [],
                      world.reconcile)
    view = run(cancel_once(rt, world.start(rt), started, "user pressed stop"))
    assert view.state is S.CANCELLED and view.assistant == ()


# Writes "pid pgid" of a grandchild it spawned into argv[1], then sleeps until stopped.
CHILD = textwrap.dedent("""
    import os, subprocess, sys, time
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(f"{sleeper.pid} {os.getpgid(0)}")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(60)
""")


def test_a_run_cancelled_mid_child_process_leaves_no_process_and_resumes(
        world: World, tmp_path: Path) -> None:
    ready = tmp_path / "pids"

    async def job(tool_call: ToolCall) -> ToolOutput:
        done = await run_process([sys.executable, "-c", CHILD, str(ready)], grace_s=1.0)
        return ToolOutput(done.stdout)

    async def scenario(rt: AgentRuntime, run_id: str) -> RunView:
        advancing = asyncio.ensure_future(rt.advance(run_id))
        while not ready.exists():  # bounded by run()'s deadline
            assert not advancing.done(), "the tool ended before it could be cancelled"
            await asyncio.sleep(0.01)
        view = await rt.cancel(run_id, "user pressed stop")
        await settle(advancing)
        return view

    tool = FakeTool("build", Effect.NON_IDEMPOTENT, "chat", action=job)
    script = [call(tool_use("build", {"target": "all"})), say("built")]
    rt = world.runtime(script, [tool.tool])
    view = run(scenario(rt, world.start(rt)))
    grandchild, pgid = map(int, ready.read_text().split())
    assert view.state is S.CANCELLED
    assert group_gone(pgid) and gone(grandchild)
    resumed = run(world.runtime(script, [tool.tool]).resume(view.run_id)).view
    assert (resumed.state, resumed.output) == (S.COMPLETED, "built")
    assert len(tool.calls) == 1


def test_a_run_cancelled_by_another_worker_stops_the_one_advancing_it(world: World) -> None:
    """The cancel is recorded at once where it is sent; the call in flight in the worker that
    advances the run ends there, is kept as in doubt, and that worker stops without an error."""
    started, release = asyncio.Event(), asyncio.Event()

    async def held(tool_call: ToolCall) -> ToolOutput:
        started.set()
        await release.wait()
        return ToolOutput("sent", status=200)

    tool = send(action=held)
    advancing = world.runtime(script_for(tool), [tool.tool])
    elsewhere = world.runtime(script_for(tool), [tool.tool])
    run_id = world.start(advancing)

    async def scenario() -> tuple[RunView, RunView]:
        task = asyncio.ensure_future(advancing.advance(run_id))
        await started.wait()
        cancelled = await elsewhere.cancel(run_id, "stopped from another replica")
        release.set()
        return cancelled, (await task).view

    cancelled, ended = run(scenario())
    assert cancelled.state is ended.state is S.CANCELLED and ended == cancelled
    assert len(tool.calls) == 1
    [attempt] = world.store.facts(operation_id(run_id, FIRST)).attempts
    assert attempt.outcome is Outcome.TIMEOUT  # in doubt: the reconciler probes it


def test_a_cancel_that_arrives_as_the_run_pauses_still_cancels_it(
        world: World, mono: ManualMonotonic) -> None:
    async def last_step(tool_call: ToolCall) -> ToolOutput:
        # The cancel comes in as this call ends, and the deadline has come too: the loop
        # pauses without another model or tool call that would notice the signal.
        cancelling.append(asyncio.ensure_future(rt.cancel(tool_call.run_id, "user stop")))
        mono.advance(100)
        return ToolOutput("ok")

    cancelling: list[asyncio.Future[RunView]] = []
    tool = lookup(action=last_step)
    script = [call(tool_use("lookup", {"n": 1}), tool_use("lookup", {"n": 2})), say("done")]
    rt = world.runtime(script, [tool.tool])
    run_id = world.start(rt)

    async def scenario() -> RunView:
        await rt.advance(run_id, deadline=mono() + 10)
        return await cancelling[0]

    view = run(scenario())
    assert view.state is S.CANCELLED and len(tool.calls) == 1
    assert view.cancellation is not None and view.cancellation["reason"] == "user stop"


def test_a_cancelled_run_cannot_be_cancelled_again(world: World) -> None:
    rt = world.runtime([say("done")])
    run_id = world.start(rt)
    run(rt.cancel(run_id, "first"))
    with pytest.raises(IllegalTransitionError):
        run(rt.cancel(run_id, "second"))
    cancellation = world.journal.load(run_id).cancellation
    assert cancellation is not None and cancellation["reason"] == "first"


def test_a_handler_gets_the_cancel_signal_for_work_it_hands_to_a_thread(world: World) -> None:
    """The handler's task is cancelled, but a thread cannot be: it stops because it watches
    the signal the handler passed it."""
    started, stopped = asyncio.Event(), threading.Event()

    def blocking(cancel: CancelSignal) -> None:
        for _ in range(int(DEADLINE_S * 100)):
            if cancel.cancelled:
                stopped.set()
                return
            time.sleep(0.01)

    async def in_thread(tool_call: ToolCall) -> ToolOutput:
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(None, blocking, tool_call.cancel)
        started.set()
        await work
        return ToolOutput("finished without a cancel")

    rt = world.runtime([call(tool_use("lookup", {"q": 1})), say("done")],
                       [lookup(action=in_thread).tool])
    view = run(cancel_once(rt, world.start(rt), started, "user pressed stop"))
    assert view.state is S.CANCELLED and stopped.wait(5)
