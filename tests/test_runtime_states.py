"""The run state machine: exactly the issue's moves are legal, through the journal; an illegal one
raises and writes nothing; and each state records what it must."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from reconciler.core.errors import IllegalTransitionError
from reconciler.core.runs.events import EventKind
from reconciler.core.runs.messages import ModelRequest, ModelResponse
from reconciler.core.runs.states import RESUMABLE, TRANSITIONS, RunState, check_move
from reconciler.runtime.models import ModelCallError
from reconciler.runtime.scripted import call, say, tool_use

from journal_rows import summary_row
from runtime_harness import World, lookup, run, send

S = RunState

#: The legal moves, as the issue states them (not read from the code under test).
LEGAL = {
    (S.QUEUED, S.RUNNING), (S.QUEUED, S.CANCELLED),
    (S.RUNNING, S.AWAITING_TOOL), (S.RUNNING, S.AWAITING_APPROVAL), (S.RUNNING, S.COMPLETED),
    (S.RUNNING, S.FAILED), (S.RUNNING, S.CANCELLED),
    (S.AWAITING_TOOL, S.RUNNING), (S.AWAITING_TOOL, S.AWAITING_APPROVAL),
    (S.AWAITING_TOOL, S.FAILED), (S.AWAITING_TOOL, S.CANCELLED),
    (S.AWAITING_APPROVAL, S.AWAITING_TOOL), (S.AWAITING_APPROVAL, S.RUNNING),
    (S.AWAITING_APPROVAL, S.CANCELLED), (S.AWAITING_APPROVAL, S.TIMED_OUT),
    # Back to the queue by explicit resume only.
    (S.FAILED, S.QUEUED), (S.CANCELLED, S.QUEUED), (S.TIMED_OUT, S.QUEUED),
}

REQUEST = {"turn": 1, "name": "send", "input": {"to": "x"}, "effect": "non_idempotent",
           "arguments_hash": "sha256:" + "a" * 64}


def requested(tool_call_id: str) -> dict[str, Any]:
    return {**REQUEST, "tool_call_id": tool_call_id}


#: The event that moves a run into each state, with what it carries.
ENTER: dict[RunState, tuple[EventKind, dict[str, Any]]] = {
    S.QUEUED: (EventKind.RESUMED, {"config": {}}),
    S.RUNNING: (EventKind.STARTED, {}),
    S.AWAITING_TOOL: (EventKind.TOOL_REQUESTED, requested("toolu_next")),
    S.AWAITING_APPROVAL: (EventKind.APPROVAL_REQUESTED, {"turn": 1, "tool_call_id": "toolu_1",
                                                    "resume_token": "tok", "payload": {}}),
    S.COMPLETED: (EventKind.COMPLETED, {"output": "done", "stop_reason": "end_turn"}),
    S.FAILED: (EventKind.FAILED, {"error_code": "model_error", "phase": "model_call",
                             "message": "down", "last_checkpoint": 0}),
    S.CANCELLED: (EventKind.CANCELLED, {"reason": "stop", "partial_results": []}),
    S.TIMED_OUT: (EventKind.TIMED_OUT, {"reason": "no decision", "tool_call_id": "toolu_1"}),
}
#: How a fresh (queued) run gets to each state.
PATH: dict[RunState, tuple[tuple[EventKind, dict[str, Any]], ...]] = {
    S.QUEUED: (),
    S.RUNNING: (ENTER[S.RUNNING],),
    S.AWAITING_TOOL: (ENTER[S.RUNNING], (EventKind.TOOL_REQUESTED, requested("toolu_1"))),
    S.AWAITING_APPROVAL: (ENTER[S.RUNNING], (EventKind.TOOL_REQUESTED, requested("toolu_1")),
                          ENTER[S.AWAITING_APPROVAL]),
    S.COMPLETED: (ENTER[S.RUNNING], ENTER[S.COMPLETED]),
    S.FAILED: (ENTER[S.RUNNING], ENTER[S.FAILED]),
    S.CANCELLED: (ENTER[S.CANCELLED],),
    S.TIMED_OUT: (ENTER[S.RUNNING], (EventKind.TOOL_REQUESTED, requested("toolu_1")),
                  ENTER[S.AWAITING_APPROVAL], ENTER[S.TIMED_OUT]),
}
#: Events that would enter the state the run is in already (a second start, a second
#: completion, a resume of a queued run, ...).
REENTER = {**ENTER, S.AWAITING_TOOL: (EventKind.APPROVAL_DECIDED, {"tool_call_id": "toolu_1",
                                                              "decision": "reject"})}


def run_in(world: World, state: RunState) -> str:
    view = world.journal.create(f"run-{state.value}", {"input": "x", "config": {}},
                                world.clock())
    for kind, data in PATH[state]:
        view = world.journal.append(view, kind, data, world.clock())
    assert view.state is state
    return view.run_id


def stored(world: World, run_id: str) -> tuple[list[Any], dict[str, Any]]:
    row = summary_row(world.journal, run_id)
    return world.journal.events(run_id), row.model_dump()


def test_the_table_is_the_issues_table() -> None:
    table = {(src, dst) for src, targets in TRANSITIONS.items() for dst in targets}
    resumes = {(src, S.QUEUED) for src in RESUMABLE}
    assert set(TRANSITIONS) == set(S)
    assert table | resumes == LEGAL and not table & resumes


@pytest.mark.parametrize(("src", "dst"), [
    pytest.param(src, dst, id=f"{src.value}->{dst.value}")
    for src, dst in itertools.product(S, S) if src is not dst])
def test_a_move_is_written_if_legal_and_refused_without_a_write_if_not(
        world: World, src: RunState, dst: RunState) -> None:
    run_id = run_in(world, src)
    before = stored(world, run_id)
    kind, data = ENTER[dst]
    if (src, dst) in LEGAL:
        world.journal.append(world.journal.load(run_id), kind, data, world.clock())
        assert world.journal.load(run_id).state is dst
        assert summary_row(world.journal, run_id).state == dst.value
    else:
        with pytest.raises(IllegalTransitionError):
            world.journal.append(world.journal.load(run_id), kind, data, world.clock())
        assert stored(world, run_id) == before


@pytest.mark.parametrize("state", list(S), ids=[s.value for s in S])
def test_an_event_entering_the_state_the_run_is_in_is_refused(world: World,
                                                               state: RunState) -> None:
    run_id = run_in(world, state)
    before = stored(world, run_id)
    kind, data = REENTER[state]
    with pytest.raises(IllegalTransitionError):
        world.journal.append(world.journal.load(run_id), kind, data, world.clock())
    assert stored(world, run_id) == before


@pytest.mark.parametrize(("state", "kind", "data"), [
    (S.RUNNING, EventKind.CHECKPOINT, {"turn": 1, "tool_steps": 0}),
    (S.AWAITING_TOOL, EventKind.TOOL_REQUESTED, requested("toolu_2")),
], ids=["checkpoint-while-running", "second-call-of-a-turn"])
def test_events_that_keep_a_live_run_going_are_no_moves(
        world: World, state: RunState, kind: EventKind, data: dict[str, Any]) -> None:
    run_id = run_in(world, state)
    view = world.journal.append(world.journal.load(run_id), kind, data, world.clock())
    assert view.state is state and world.journal.load(run_id) == view


@pytest.mark.parametrize("src", sorted(RESUMABLE), ids=lambda s: s.value)
def test_a_stopped_run_goes_back_to_the_queue_only_by_explicit_resume(src: RunState) -> None:
    check_move("r", src, S.QUEUED, resume=True)
    with pytest.raises(IllegalTransitionError, match="use resume"):
        check_move("r", src, S.QUEUED)


@pytest.mark.parametrize("src", [s for s in S if s not in RESUMABLE], ids=lambda s: s.value)
def test_only_failed_cancelled_and_timed_out_runs_can_be_resumed(src: RunState) -> None:
    with pytest.raises(IllegalTransitionError, match="can be resumed"):
        check_move("r", src, S.QUEUED, resume=True)


def test_completed_is_terminal_even_for_resume(world: World) -> None:
    rt = world.runtime([say("done")])
    run_id = world.start(rt)
    assert run(rt.advance(run_id)).view.state is S.COMPLETED
    before = stored(world, run_id)
    with pytest.raises(IllegalTransitionError):
        run(rt.resume(run_id))
    with pytest.raises(IllegalTransitionError):
        run(rt.cancel(run_id, "too late"))
    assert stored(world, run_id) == before


def test_creation_records_input_configuration_and_correlation_id(world: World) -> None:
    rt = world.runtime([say("done")])
    view = rt.create("book a room", config={"max_turns": 4}, correlation_id="ticket-7")
    [created] = world.journal.events(view.run_id)
    assert created.kind is EventKind.CREATED and created.seq == 1
    assert created.data == {"input": "book a room", "config": {"max_turns": 4},
                            "correlation_id": "ticket-7"}
    assert (view.state, view.input, view.config, view.correlation_id) == (
        S.QUEUED, "book a room", {"max_turns": 4}, "ticket-7")


def test_completion_records_output_stop_reason_and_aggregated_usage(world: World) -> None:
    rt = world.runtime([call(tool_use("lookup", {"q": 1})), say("the answer")], [lookup().tool])
    run_id = world.start(rt)
    view = run(rt.advance(run_id)).view
    completed = world.journal.events(run_id)[-1]
    assert completed.kind is EventKind.COMPLETED
    # Two turns at the scripted model's default usage (100 in, 20 out).
    assert completed.data["usage"] == {"input_tokens": 200, "output_tokens": 40,
                                       "cache_creation_input_tokens": 0,
                                       "cache_read_input_tokens": 0}
    assert (view.state, view.output, view.stop_reason) == (S.COMPLETED, "the answer", "end_turn")
    row = summary_row(world.journal, run_id)
    assert (row.input_tokens, row.output_tokens, row.stop_reason) == (200, 40, "end_turn")


@pytest.mark.parametrize("error", [
    ModelCallError("overloaded", status=529, error_type="overloaded_error"),
    RuntimeError("adapter bug: overloaded response not parsed")], ids=["model_error", "bug"])
def test_failure_records_error_code_phase_and_last_checkpoint(world: World,
                                                              error: Exception) -> None:
    def model_down(request: ModelRequest) -> ModelResponse:
        raise error

    rt = world.runtime([call(tool_use("lookup")), model_down], [lookup().tool])
    run_id = world.start(rt)
    view = run(rt.advance(run_id)).view
    assert view.state is S.FAILED
    assert view.error is not None
    assert (view.error["error_code"], view.error["phase"], view.error["last_checkpoint"]) == (
        "model_error", "model_call", 1)
    assert "overloaded" in view.error["message"]
    assert summary_row(world.journal, run_id).error_code == "model_error"


def test_cancellation_records_reason_and_partial_tool_results(world: World) -> None:
    world.reconcile.finds = "unavailable"
    script = [call(tool_use("lookup", {"q": 1}), tool_use("send", {"to": "bob"}))]
    tools = [lookup().tool, send().tool]
    run_id = world.crashed_run(script, tools, "delivered", tool_call_id="toolu_s0_1")
    rt = world.runtime(script, tools)
    assert run(rt.advance(run_id, take_over=True)).view.state is S.AWAITING_APPROVAL
    view = run(rt.cancel(run_id, "user pressed stop"))
    assert view.state is S.CANCELLED
    assert view.cancellation == {"reason": "user pressed stop", "partial_results": [
        {"tool_call_id": "toolu_s0_0", "source": "handler", "is_error": False},
        {"tool_call_id": "toolu_s0_1", "source": "cancelled", "is_error": True}]}


def test_a_timed_out_run_records_why_and_which_call_waited(world: World) -> None:
    world.reconcile.finds = "unavailable"
    script = [call(tool_use("send", {"to": "bob"}))]
    run_id = world.crashed_run(script, [send().tool], "delivered", approval_timeout_s=60)
    rt = world.runtime(script, [send().tool])
    assert run(rt.advance(run_id, take_over=True)).view.state is S.AWAITING_APPROVAL
    world.clock.advance(61)
    view = rt.get(run_id)
    assert view.state is S.TIMED_OUT and view.approval is None
    assert view.error is not None
    assert (view.error["error_code"], view.error["tool_call_id"]) == (
        "approval_timed_out", "toolu_s0_0")
    assert "60s" in view.error["reason"]


def test_a_run_that_is_not_advancing_is_cancelled_where_it_stands(world: World) -> None:
    rt = world.runtime([say("never asked")])
    run_id = world.start(rt)
    view = run(rt.cancel(run_id, "not needed"))
    assert view.state is S.CANCELLED and view.cancellation == {
        "reason": "not needed", "partial_results": []}
