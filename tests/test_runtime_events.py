"""The run's event log: append-only with per-run sequence numbers, the run as a projection of
its events (rebuilt from them it is the stored run), optimistic appends, results recorded once,
and the lease that keeps one worker on a run."""

from __future__ import annotations

import pytest

from reconciler.core.errors import (
    IllegalTransitionError,
    RunConflictError,
    RunError,
    UnknownRunError,
)
from reconciler.core.runs.events import EventKind, RunEvent, RunView, apply, project
from reconciler.core.runs.states import RunState
from reconciler.runtime.scripted import call, say, tool_use
from reconciler.store.tables import RunRow

from journal_rows import result_keys, run_ids, summary_row
from runtime_harness import T0, World, lookup, put, run, send, summary_of

S = RunState


def created(world: World, run_id: str = "run-1") -> RunView:
    return world.journal.create(run_id, {"input": "task", "config": {}}, world.clock())


def result_data(tool_call_id: str = "toolu_1") -> dict[str, object]:
    return {"turn": 1, "tool_call_id": tool_call_id, "content": "ok", "source": "handler"}


def awaiting_tool(world: World) -> RunView:
    view = world.journal.append(created(world), EventKind.STARTED, {}, world.clock())
    return world.journal.append(view, EventKind.TOOL_REQUESTED, {
        "turn": 1, "tool_call_id": "toolu_1", "name": "lookup", "input": {},
        "arguments_hash": "sha256:" + "a" * 64, "effect": "read_only"}, world.clock())


# The projection, pure.


def test_a_run_starts_with_its_creation_event() -> None:
    started = RunEvent("r", 1, EventKind.STARTED, T0, {})
    with pytest.raises(RunError, match="first event is run_created"):
        project([started])
    with pytest.raises(RunError, match="needs at least its creation"):
        project([])


def test_sequence_numbers_follow_each_other_without_gaps() -> None:
    view = apply(None, RunEvent("r", 1, EventKind.CREATED, T0, {"input": "x"}))
    with pytest.raises(RunError, match="does not follow"):
        apply(view, RunEvent("r", 3, EventKind.STARTED, T0, {}))
    with pytest.raises(RunError, match="exists already"):
        apply(view, RunEvent("r", 2, EventKind.CREATED, T0, {"input": "x"}))


def test_events_of_a_live_run_are_refused_when_it_is_not_live() -> None:
    view = apply(None, RunEvent("r", 1, EventKind.CREATED, T0, {"input": "x"}))
    with pytest.raises(IllegalTransitionError, match="needs a live run"):
        apply(view, RunEvent("r", 2, EventKind.TURN, T0, {"turn": 1}))


def test_the_state_is_the_fold_of_the_events(world: World) -> None:
    rt = world.runtime([call(tool_use("lookup", {"q": 1})), say("done")], [lookup().tool])
    run_id = world.start(rt)
    advanced = run(rt.advance(run_id)).view
    events = world.journal.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert project(events) == advanced == world.journal.load(run_id)
    # Every prefix is a run too: the state after each event is where that event left it.
    states = [project(events[:n]).state for n in range(1, len(events) + 1)]
    assert states[0] is S.QUEUED and states[-1] is S.COMPLETED
    assert S.AWAITING_TOOL in states


# The journal (its rules on every backend: tests/test_journal_contract.py; here, what the SQL
# journal's rows show).


def test_an_unknown_run_is_named_as_such(world: World) -> None:
    with pytest.raises(UnknownRunError):
        world.journal.load("nope")
    with pytest.raises(UnknownRunError):
        summary_row(world.journal, "nope")
    with pytest.raises(UnknownRunError):
        world.journal.claim("nope", "w", world.clock(), 10)


def test_each_run_numbers_its_own_events(world: World) -> None:
    first, second = created(world, "run-a"), created(world, "run-b")
    first = world.journal.append(first, EventKind.STARTED, {}, world.clock())
    second = world.journal.append(second, EventKind.STARTED, {}, world.clock())
    first = world.journal.append(first, EventKind.CANCELLED, {"reason": "x"}, world.clock())
    assert [e.seq for e in world.journal.events("run-a")] == [1, 2, 3]
    assert [e.seq for e in world.journal.events("run-b")] == [1, 2]
    assert [e.kind for e in world.journal.events("run-a", after=1)] == [EventKind.STARTED,
                                                                       EventKind.CANCELLED]
    assert run_ids(world.journal, state="cancelled") == ["run-a"]
    assert run_ids(world.journal, state="running") == ["run-b"]


def test_an_append_on_a_stale_view_conflicts_and_writes_nothing(world: World) -> None:
    stale = created(world)
    world.journal.append(stale, EventKind.STARTED, {}, world.clock())
    before = world.journal.events("run-1"), summary_row(world.journal, "run-1").model_dump()
    with pytest.raises(RunConflictError, match="reload"):
        world.journal.append(stale, EventKind.CANCELLED, {"reason": "late"}, world.clock())
    after = world.journal.events("run-1"), summary_row(world.journal, "run-1").model_dump()
    assert after == before


def test_a_tool_result_is_recorded_once_per_run_turn_and_call(world: World) -> None:
    view = world.journal.append(awaiting_tool(world), EventKind.TOOL_RESULT, result_data(),
                                world.clock())
    assert result_keys(world.journal, "run-1") == {(1, "toolu_1")}
    before = world.journal.events("run-1")
    with pytest.raises(RunError, match="has its result already"):
        world.journal.append(view, EventKind.TOOL_RESULT, result_data(), world.clock())
    assert world.journal.events("run-1") == before
    assert result_keys(world.journal, "run-1") == {(1, "toolu_1")}


def test_a_result_for_a_call_never_requested_is_refused(world: World) -> None:
    view = awaiting_tool(world)
    with pytest.raises(RunError, match="unknown tool call"):
        world.journal.append(view, EventKind.TOOL_RESULT, result_data("toolu_9"), world.clock())
    assert result_keys(world.journal, "run-1") == set()


def test_a_tool_call_is_requested_once(world: World) -> None:
    view = awaiting_tool(world)
    request = world.journal.events("run-1")[-1].data
    with pytest.raises(RunError, match="requested already"):
        world.journal.append(view, EventKind.TOOL_REQUESTED, request, world.clock())


# Rebuilding runs.


def test_every_run_rebuilt_from_its_events_is_the_stored_run(world: World) -> None:
    """Runs in every state the runtime leaves them in; each rebuilds to its stored summary and
    to the view the runtime returned."""
    script = [call(tool_use("lookup", {"q": 1}), tool_use("put", {"k": "v"})), say("done")]
    tools = [lookup().tool, put().tool]
    returned: dict[str, RunView] = {}

    rt = world.runtime(script, tools)
    completed = rt.create("finish", correlation_id="c-1").run_id
    returned[completed] = run(rt.advance(completed)).view
    over_budget = world.start(rt, max_tokens=1)
    returned[over_budget] = run(rt.advance(over_budget)).view
    cancelled = world.start(rt)
    returned[cancelled] = run(rt.cancel(cancelled, "not needed"))
    world.reconcile.finds = "unavailable"
    waiting = world.crashed_run(script, tools, "delivered", tool_call_id="toolu_s0_1")
    returned[waiting] = run(world.runtime(script, tools).advance(waiting, take_over=True)).view
    timed_out = world.crashed_run(script, tools, "delivered", tool_call_id="toolu_s0_1",
                                  approval_timeout_s=1)
    run(world.runtime(script, tools).advance(timed_out, take_over=True))
    world.clock.advance(2)
    returned[timed_out] = world.runtime(script, tools).get(timed_out)
    resumed = world.start(rt)
    run(rt.cancel(resumed, "paused by hand"))
    world.reconcile.finds = "applied"
    returned[resumed] = run(rt.resume(resumed)).view

    assert {view.state for view in returned.values()} == {
        S.COMPLETED, S.FAILED, S.CANCELLED, S.AWAITING_APPROVAL, S.TIMED_OUT}
    assert set(run_ids(world.journal)) == set(returned)
    for run_id, view in returned.items():
        rebuilt = project(world.journal.events(run_id))
        assert rebuilt == view
        row = summary_row(world.journal, run_id)
        assert summary_of(rebuilt) == {name: getattr(row, name) for name in summary_of(rebuilt)}
    assert world.rebuilt_differs() == {}


def test_a_summary_that_disagrees_with_the_events_is_found() -> None:
    """The rebuild check can fail: a summary changed behind the journal's back is caught."""
    world = World.open()
    created(world)
    with world.store.session() as s:
        row = s.get(RunRow, "run-1")
        assert row is not None
        row.state = "completed"
    assert set(world.rebuilt_differs()) == {"run-1"}


# The lease.


def test_a_run_another_worker_holds_is_only_taken_over_on_purpose(world: World) -> None:
    rt = world.runtime([say("done")])
    run_id = world.start(rt)
    assert world.journal.claim(run_id, "dead-worker", world.clock(), 300)
    with pytest.raises(RunConflictError, match="another worker holds"):
        run(rt.advance(run_id))
    assert world.journal.load(run_id).state is S.QUEUED
    assert run(rt.advance(run_id, take_over=True)).view.state is S.COMPLETED
    assert summary_row(world.journal, run_id).holder is None


def test_a_send_recorded_before_a_crash_is_not_recorded_again(world: World) -> None:
    """Resuming replays recorded results: a call whose result is in the log is never run again,
    and its result key stays the one row."""
    tool = send()
    script = [call(tool_use("send", {"to": "bob"})), say("done")]
    run_id = world.crashed_run(script, [tool.tool], "result_recorded")
    keys = result_keys(world.journal, run_id)
    view = run(world.runtime(script, [tool.tool]).advance(run_id, take_over=True)).view
    assert view.state is S.COMPLETED and len(tool.calls) == 1
    assert result_keys(world.journal, run_id) == keys == {(1, "toolu_s0_0")}
    results = [e for e in world.journal.events(run_id) if e.kind is EventKind.TOOL_RESULT]
    assert len(results) == 1
