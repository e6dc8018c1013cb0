"""Derived operation ids (SPEC section 2): two different (run id, tool call id) pairs never share
an operation, and a call recorded under the old `run_id:tool_call_id` id is still found."""

from __future__ import annotations

import pytest

from reconciler.core.runs.states import RunState
from reconciler.runtime import toolgate
from reconciler.runtime.scripted import call, say, tool_use
from reconciler.runtime.tools import OPERATION_ID_MAX, operation_id

from runtime_harness import TEST_CONFIG, Crash, CrashAt, World, run, send

#: Pairs that plain joining with ":" (the old derivation) or "/" would merge.
COLLIDING = [(("r:1", "c"), ("r", "1:c")), (("r/1", "c"), ("r", "1/c")),
             (("a=", "c"), ("a", "=c")), (("a=c", "x"), ("a:", "x"))]


@pytest.mark.parametrize(("one", "other"), COLLIDING)
def test_pairs_that_join_alike_get_distinct_operation_ids(one: tuple[str, str],
                                                         other: tuple[str, str]) -> None:
    assert operation_id(*one) != operation_id(*other)


def test_derived_ids_stay_readable_and_fit_the_store() -> None:
    assert operation_id("run_1", "toolu_01") == "run_1/toolu_01"
    long_pair = ("r" * 120, "c" * 120)
    derived = operation_id(*long_pair)
    assert len(derived) <= OPERATION_ID_MAX and derived != operation_id("r" * 120, "c" * 119)


def test_a_derived_id_is_never_an_old_style_id() -> None:
    """Old ids were `run:call`, always with a ':'; no derived id has one, long or not."""
    for run_id, call_id in [*[p for pair in COLLIDING for p in pair], ("r" * 150, "c" * 150)]:
        assert ":" not in operation_id(run_id, call_id)


def test_runs_whose_ids_joined_alike_each_get_their_own_operation(world: World) -> None:
    """Run `r:1` call `c` and run `r` call `1:c` once shared operation `r:1:c`: the second run
    sent for real and was handed the first run's evidence."""
    tool = send()
    for run_id, call_id in (("r:1", "c"), ("r", "1:c")):
        rt = world.runtime([call(tool_use("send", {"to": "bob"}, id=call_id)), say("done")],
                           [tool.tool])
        rt.create("send it", run_id=run_id, config=TEST_CONFIG)
        assert run(rt.advance(run_id)).view.state is RunState.COMPLETED
        facts = world.store.facts(operation_id(run_id, call_id))
        assert (facts.intent.run_id, facts.intent.tool_call_id) == (run_id, call_id)
        assert [a.number for a in facts.attempts] == [1]
    assert [c.operation_id for c in tool.calls] == [operation_id("r:1", "c"),
                                                     operation_id("r", "1:c")]


def test_a_call_requested_under_an_old_id_is_still_found(world: World,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A run in flight across the upgrade: its call was requested (and journaled) with an old
    `run:call` id; the worker that takes it over dispatches and records under that id."""
    tool = send()
    script = [call(tool_use("send", {"to": "bob"}, id="toolu_1")), say("done")]
    monkeypatch.setattr(toolgate, "operation_id", lambda run_id, call_id: f"{run_id}:{call_id}")
    old = world.runtime(script, [tool.tool], hook=CrashAt("requested"))
    run_id = world.start(old)
    with pytest.raises(Crash):
        run(old.advance(run_id))
    monkeypatch.undo()
    view = run(world.runtime(script, [tool.tool]).advance(run_id, take_over=True)).view
    assert view.state is RunState.COMPLETED
    old_id = f"{run_id}:toolu_1"
    assert [c.operation_id for c in tool.calls] == [old_id]
    assert [a.number for a in world.store.facts(old_id).attempts] == [1]
