"""The loop guards: run configuration, token and cost budgets checked before a turn, the
repetition rule, the per-turn call limit and the final turn; first as pure checks, then as the
run loop applies them."""

from __future__ import annotations

import pytest

from reconciler.core.errors import UnknownOperationError
from reconciler.core.runs.events import EventKind
from reconciler.core.runs.messages import ModelResponse, Usage
from reconciler.core.runs.states import RunState
from reconciler.runtime.guards import (
    FINAL_NOTICE,
    Attempted,
    RunConfig,
    budget_stop,
    is_repeat,
    over_limit_message,
    repeat_message,
    turn_estimate,
)
from reconciler.runtime.scripted import ScriptedModel, call, say, tool_use
from reconciler.runtime.tools import ToolCall, ToolOutput, operation_id

from runtime_harness import FakeTool, World, lookup, run, send

TURN = Usage(input_tokens=100, output_tokens=20)
#: $10 per million input tokens, $50 per million output tokens: TURN costs $0.002.
PRICES = {"input": 10.0, "output": 50.0}


def test_a_stored_configuration_is_read_back_with_its_prices() -> None:
    config = RunConfig.of({"max_turns": 3, "prices": {"input": 1.5, "cache_read": 0.1}})
    assert config.max_turns == 3
    assert (config.prices.input, config.prices.cache_read, config.prices.output) == (1.5, 0.1, 0)
    assert RunConfig.of({}) == RunConfig()


def test_unknown_configuration_keys_are_named() -> None:
    with pytest.raises(ValueError, match=r"\['max_turn', 'tokens'\]"):
        RunConfig.of({"max_turn": 3, "tokens": 5})


@pytest.mark.parametrize("bad", [{"max_turns": 0}, {"max_tool_calls_per_turn": 0},
                                 {"repeat_limit": 1}])
def test_limits_that_would_stop_every_run_are_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=">= 1"):
        RunConfig.of(bad)


def test_cost_counts_every_kind_of_token_at_its_price() -> None:
    config = RunConfig.of({"prices": {"input": 1, "output": 2, "cache_creation": 3,
                                      "cache_read": 4}})
    assert config.prices.cost(Usage(1_000_000, 1_000_000, 1_000_000, 1_000_000)) == 10.0


def test_the_next_turn_is_expected_to_cost_the_largest_turn_so_far() -> None:
    assert turn_estimate([]) == Usage()
    assert turn_estimate([TURN, Usage(input_tokens=500), TURN]) == Usage(input_tokens=500)


def test_the_first_turn_starts_while_the_budget_is_not_spent() -> None:
    assert budget_stop(RunConfig(max_tokens=1, max_cost_usd=0.000001), []) is None


def test_no_budget_means_no_stop() -> None:
    assert budget_stop(RunConfig(), [TURN] * 1000) is None


def test_a_turn_that_would_exceed_the_token_budget_is_not_started() -> None:
    config = RunConfig(max_tokens=360)
    assert budget_stop(config, [TURN, TURN]) is None  # 240 used + 120 expected = 360
    stop = budget_stop(RunConfig(max_tokens=359), [TURN, TURN])
    assert stop is not None and "token budget" in stop and "240 used" in stop


def test_a_turn_that_would_exceed_the_cost_budget_is_not_started() -> None:
    within = RunConfig.of({"max_cost_usd": 0.006, "prices": PRICES})
    assert budget_stop(within, [TURN, TURN]) is None  # $0.004 + $0.002 = $0.006
    over = RunConfig.of({"max_cost_usd": 0.0059, "prices": PRICES})
    stop = budget_stop(over, [TURN, TURN])
    assert stop is not None and "cost budget" in stop and "$0.0040 used" in stop


SAME = ("search", "sha256:1")
OTHER = ("fetch", "sha256:2")


def done(key: tuple[str, str], answer: str | None = "found 1") -> Attempted:
    return Attempted(key, answer)


def test_the_third_identical_call_that_answered_the_same_is_a_repeat() -> None:
    config = RunConfig()
    assert not is_repeat([], SAME, config)
    assert not is_repeat([done(SAME)], SAME, config)
    assert is_repeat([done(SAME), done(SAME)], SAME, config)
    assert is_repeat([done(OTHER), done(SAME), done(SAME)], SAME, config)


def test_a_cycle_a_b_a_b_within_the_window_is_a_repeat() -> None:
    cycle = [done(SAME), done(OTHER), done(SAME), done(OTHER)]
    assert is_repeat(cycle, SAME, RunConfig())
    assert is_repeat(cycle, OTHER, RunConfig())


def test_identical_calls_further_back_than_the_window_do_not_count() -> None:
    spread = [done(SAME), *(done(("f", f"sha256:{n}")) for n in range(5)), done(SAME)]
    assert is_repeat(spread, SAME, RunConfig(repeat_window=7))
    assert not is_repeat(spread, SAME, RunConfig(repeat_window=6))


def test_failing_repeats_are_intercepted_but_repeats_that_make_progress_are_not() -> None:
    config = RunConfig()
    assert is_repeat([done(SAME, None), done(SAME, None)], SAME, config)
    assert is_repeat([done(SAME, "status: running"), done(SAME, None)], SAME, config)
    assert not is_repeat([done(SAME, "status: queued"), done(SAME, "status: running")], SAME,
                         config)


def test_every_repeat_is_intercepted_when_configured_so() -> None:
    progress = [done(SAME, "status: queued"), done(SAME, "status: running")]
    assert is_repeat(progress, SAME, RunConfig(repeat_only_unproductive=False))


def test_the_repeat_limit_is_configurable() -> None:
    assert is_repeat([done(SAME)], SAME, RunConfig(repeat_limit=2))
    assert not is_repeat([done(SAME), done(SAME)], SAME, RunConfig(repeat_limit=4))


def test_a_window_too_small_for_the_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="repeat_window"):
        RunConfig.of({"repeat_limit": 4, "repeat_window": 2})


def test_the_synthetic_errors_explain_what_to_do_instead() -> None:
    assert "call number 3 of 'search' with the same arguments within the last 10 calls" in (
        repeat_message("search", 3, 10))
    assert "try something different" in repeat_message("search", 3, 10)
    assert "at most 2 tool calls" in over_limit_message(2)
    assert "next turn" in over_limit_message(2)


# The guards in the run loop.


def model_of(world: World, run_id: str, script: list[ModelResponse], tools: list[FakeTool],
             **config: object) -> tuple[RunState, ScriptedModel]:
    """Advance a new run of `script` to its end; its final state and the model it talked to."""
    rt = world.runtime(script, [tool.tool for tool in tools])
    world.journal.create(run_id, {"input": "task", "config": {"reconcile_wait_s": 0, **config}},
                         world.clock())
    view = run(rt.advance(run_id)).view
    assert isinstance(rt.model, ScriptedModel)
    return view.state, rt.model


def test_a_run_over_its_token_budget_fails_before_the_turn_that_would_exceed_it(
        world: World) -> None:
    # 120 tokens a turn: after two turns 240 + 120 expected > 300.
    script = [call(tool_use("lookup", {"n": n})) for n in range(5)]
    state, model = model_of(world, "r", script, [lookup()], max_tokens=300)
    view = world.journal.load("r")
    assert state is RunState.FAILED and len(model.requests) == 2 and view.turn == 2
    assert view.error is not None
    assert (view.error["error_code"], view.error["phase"], view.error["last_checkpoint"]) == (
        "budget_exceeded", "before_turn", 2)
    assert "token budget: 240 used" in view.error["message"]


def test_a_run_over_its_cost_budget_fails_before_the_turn_that_would_exceed_it(
        world: World) -> None:
    script = [call(tool_use("lookup", {"n": n})) for n in range(5)]
    state, model = model_of(world, "r", script, [lookup()], max_cost_usd=0.005, prices=PRICES)
    view = world.journal.load("r")
    assert state is RunState.FAILED and len(model.requests) == 2
    assert view.error is not None and view.error["error_code"] == "budget_exceeded"
    assert "cost budget" in view.error["message"]


def test_a_run_stopped_by_its_budget_resumes_with_a_larger_one(world: World) -> None:
    tool = lookup()
    script = [call(tool_use("lookup", {"n": 1})), call(tool_use("lookup", {"n": 2})),
              say("done")]
    state, _ = model_of(world, "r", script, [tool], max_tokens=150)
    assert state is RunState.FAILED
    rt = world.runtime(script, [tool.tool])
    view = run(rt.resume("r", config={"max_tokens": 10_000})).view
    assert (view.state, view.output, view.turn) == (RunState.COMPLETED, "done", 3)
    assert [c.input for c in tool.calls] == [{"n": 1}, {"n": 2}]


def test_the_third_identical_call_in_a_row_is_intercepted_with_a_loop_explanation(
        world: World) -> None:
    tool = send()
    same = call(tool_use("send", {"to": "bob", "text": "hi"}))
    state, model = model_of(world, "r", [same, same, same, say("giving up")], [tool])
    view = world.journal.load("r")
    assert state is RunState.COMPLETED and len(tool.calls) == 2
    third = view.calls["toolu_s2_0"]
    assert third.result is not None and third.result.is_error
    assert third.result_source == "guard" and "number 3 of 'send'" in third.result.content
    assert third.dispatches == 0
    with pytest.raises(UnknownOperationError):  # never run, so never an intent
        world.store.facts(operation_id("r", "toolu_s2_0"))
    # The model is told, in the conversation it sees next.
    assert "number 3 of 'send'" in str(model.requests[-1].messages[-1])


def test_a_cycle_a_b_a_b_is_intercepted_at_the_third_a(world: World) -> None:
    tool = lookup()
    a, b = tool_use("lookup", {"q": "a"}), tool_use("lookup", {"q": "b"})
    script = [call(a), call(b), call(a), call(b), call(a), say("stuck")]
    state, _ = model_of(world, "r", script, [tool])
    view = world.journal.load("r")
    assert state is RunState.COMPLETED
    assert [c.input for c in tool.calls] == [{"q": "a"}, {"q": "b"}, {"q": "a"}, {"q": "b"}]
    assert view.calls["toolu_s4_0"].result_source == "guard"


def test_a_repeat_that_keeps_getting_new_answers_is_not_intercepted(world: World) -> None:
    answers = iter(["queued", "running", "running", "done"])

    async def status(tool_call: ToolCall) -> ToolOutput:
        return ToolOutput(f"job 7: {next(answers)}")

    poll = call(tool_use("lookup", {"job": 7}))
    state, _ = model_of(world, "r", [poll, poll, poll, poll, say("done")],
                        [lookup(action=status)])
    sources = [c.result_source for c in world.journal.load("r").calls.values()]
    assert state is RunState.COMPLETED and sources == ["handler"] * 4


def test_identical_calls_within_one_turn_are_intercepted_too(world: World) -> None:
    tool = lookup()
    same = tool_use("lookup", {"q": "x"})
    state, _ = model_of(world, "r", [call(same, same, same, same), say("ok")], [tool])
    view = world.journal.load("r")
    assert state is RunState.COMPLETED and len(tool.calls) == 2
    assert [view.calls[f"toolu_s0_{i}"].result_source for i in range(4)] == [
        "handler", "handler", "guard", "guard"]


def test_calls_over_the_per_turn_limit_are_answered_with_a_synthetic_error(
        world: World) -> None:
    tool = lookup()
    asked = call(*(tool_use("lookup", {"n": n}) for n in range(4)))
    state, model = model_of(world, "r", [asked, say("ok")], [tool], max_tool_calls_per_turn=2)
    view = world.journal.load("r")
    assert state is RunState.COMPLETED
    assert [c.input for c in tool.calls] == [{"n": 0}, {"n": 1}]
    refused = [view.calls[f"toolu_s0_{i}"].result for i in (2, 3)]
    assert all(r is not None and r.is_error and "at most 2 tool calls" in r.content
               for r in refused)
    # Every call is answered, so the conversation stays valid for the next turn.
    assert len(model.requests[1].messages[-1].content) == 4


def test_the_final_turn_offers_no_tools_and_asks_for_a_final_answer(world: World) -> None:
    script = [call(tool_use("lookup", {"n": n})) for n in range(2)] + [say("final answer")]
    state, model = model_of(world, "r", script, [lookup()], max_turns=3)
    assert state is RunState.COMPLETED
    assert [bool(r.tools) for r in model.requests] == [True, True, False]
    assert [FINAL_NOTICE in r.system for r in model.requests] == [False, False, True]
    view = world.journal.load("r")
    assert (view.output, view.stop_reason) == ("final answer", "end_turn")


def test_tools_asked_for_in_the_final_turn_are_not_run_and_the_run_stops(world: World) -> None:
    tool = lookup()
    script = [call(tool_use("lookup", {"n": n}), text=f"step {n}") for n in range(5)]
    state, model = model_of(world, "r", script, [tool], max_turns=2)
    view = world.journal.load("r")
    assert state is RunState.COMPLETED and len(model.requests) == 2 and len(tool.calls) == 1
    last = view.calls["toolu_s1_1"]
    assert last.result is not None and last.result_source == "guard"
    assert "final turn" in last.result.content
    assert (view.output, view.stop_reason) == ("step 1", "max_turns")
    assert world.journal.events("r")[-1].kind is EventKind.COMPLETED

