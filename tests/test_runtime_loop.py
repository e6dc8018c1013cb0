"""The run loop's tool gate (write-ahead before any handler runs) and recovery after a crash,
by effect class.

A crash is a hook raising at a named point; a new runtime on the same store then takes over."""

from __future__ import annotations

import json

import pytest

from reconciler.core import verdicts
from reconciler.core.domain import Effect, Facts, Match, Outcome, ProviderContract, Verdict
from reconciler.core.hashing import derive_idempotency_key, request_hash
from reconciler.core.runs.events import EventKind, RunView
from reconciler.core.runs.states import RunState
from reconciler.runtime.scripted import call, say, tool_use
from reconciler.runtime.tools import ToolCall, ToolOutput, operation_id

from journal_rows import result_keys
from runtime_harness import (
    EVERY_EFFECT,
    FIRST,
    WRITES,
    Finding,
    Make,
    World,
    crashed,
    first_call,
    lookup,
    put,
    run,
    script_for,
    send,
    take_over,
)

S = RunState



@pytest.mark.parametrize("make", EVERY_EFFECT)
def test_the_call_and_its_intent_are_recorded_before_the_handler_runs(world: World,
                                                                       make: Make) -> None:
    seen: list[tuple[RunView, ToolCall, Facts | None]] = []

    async def look(tool_call: ToolCall) -> ToolOutput:
        op = tool_call.operation_id
        seen.append((world.journal.load(tool_call.run_id), tool_call,
                     world.store.facts(op) if op else None))
        return ToolOutput("ok")

    tool = make(action=look)
    run_id = world.finished_run(script_for(tool), [tool.tool]).run_id
    [(view, tool_call, facts)] = seen
    assert view.assistant[-1][1].tool_uses()[0].id == FIRST
    recorded = first_call(view)
    key = derive_idempotency_key(run_id, FIRST)
    assert (recorded.name, dict(recorded.input), recorded.effect, recorded.idempotency_key) == (
        tool.name, {"to": "bob", "n": 1}, tool.effect.value, key)
    assert recorded.arguments_hash == request_hash({"n": 1, "to": "bob"})
    assert recorded.dispatches == 1 and recorded.result is None
    assert (tool_call.idempotency_key, tool_call.attempt) == (key, 1)
    if tool.effect is Effect.READ_ONLY:
        assert recorded.operation_id is None and facts is None
        return
    assert recorded.operation_id == tool_call.operation_id == operation_id(run_id, FIRST)
    assert facts is not None
    intent = facts.intent
    assert (intent.run_id, intent.tool_call_id, intent.effect) == (run_id, FIRST, tool.effect)
    assert intent.request_hash == recorded.arguments_hash
    # Only an idempotent write sends its key by default; the intent records what is sent.
    assert intent.idempotency_key == (key if tool.effect is Effect.IDEMPOTENT_WRITE else None)
    # The attempt is opened before the first byte leaves, and completed after.
    assert [(a.number, a.outcome) for a in facts.attempts] == [(1, Outcome.DISPATCHING)]


def test_the_argument_hash_is_canonical(world: World) -> None:
    script = [call(tool_use("lookup", {"a": 1, "b": [1, 2]}),
                   tool_use("lookup", {"b": [1, 2], "a": 1})), say("done")]
    view = world.finished_run(script, [lookup().tool])
    hashes = {c.arguments_hash for c in view.calls.values()}
    assert hashes == {request_hash({"a": 1, "b": [1, 2]})}


def test_the_attempt_records_what_the_wire_said(world: World) -> None:
    async def sent(tool_call: ToolCall) -> ToolOutput:
        return ToolOutput("sent", status=201, receipt=Match("msg_1"))

    tool = send(action=sent)
    view = world.finished_run(script_for(tool), [tool.tool])
    [attempt] = world.store.facts(operation_id(view.run_id, FIRST)).attempts
    assert (attempt.number, attempt.outcome, attempt.status, attempt.receipt) == (
        1, Outcome.RESPONSE, 201, Match("msg_1"))
    assert first_call(view).result_source == "handler" and view.state is S.COMPLETED


def test_a_read_only_handler_that_fails_shows_the_model_its_error(world: World) -> None:
    async def broken(tool_call: ToolCall) -> ToolOutput:
        raise ValueError("index missing")

    tool = lookup(action=broken)
    view = world.finished_run(script_for(tool), [tool.tool])
    result = first_call(view).result
    assert result is not None and result.is_error
    assert result.content == "lookup failed: ValueError: index missing"
    assert view.state is S.COMPLETED and world.reconcile.asked == []


def test_an_unknown_tool_is_answered_with_the_tools_there_are(world: World) -> None:
    script = [call(tool_use("delete_everything")), say("done")]
    result = first_call(world.finished_run(script, [lookup().tool])).result
    assert result is not None and result.is_error
    assert "Unknown tool 'delete_everything'; available: lookup" in result.content


@pytest.mark.parametrize("answer", ["timeout", "raises"])
def test_a_write_without_an_answer_is_reconciled_before_the_model_sees_a_result(
        world: World, answer: str) -> None:
    async def lost(tool_call: ToolCall) -> ToolOutput:
        if answer == "raises":
            raise RuntimeError("socket closed")
        return ToolOutput("no answer", is_error=True, outcome=Outcome.TIMEOUT)

    tool = send(action=lost)
    view = world.finished_run(script_for(tool), [tool.tool])
    op = operation_id(view.run_id, FIRST)
    assert world.reconcile.asked == [op]
    assert first_call(view).result_source == "reconciled"
    assert [a.outcome for a in world.store.facts(op).attempts] == [Outcome.TIMEOUT]
    assert view.state is S.COMPLETED and len(tool.calls) == 1


# Recovery after a crash, by effect class.


def test_a_read_only_call_in_doubt_runs_again(world: World) -> None:
    tool = lookup()
    view = take_over(world, tool, crashed(world, tool, "delivered"))
    assert view.state is S.COMPLETED and len(tool.calls) == 2
    assert first_call(view).dispatches == 2 and world.reconcile.asked == []


@pytest.mark.parametrize("make", WRITES)
def test_a_write_the_provider_shows_applied_gets_its_result_from_the_evidence(
        world: World, make: Make) -> None:
    tool = make()
    run_id = crashed(world, tool, "delivered")
    view = take_over(world, tool, run_id)
    assert view.state is S.COMPLETED and len(tool.calls) == 1
    result = first_call(view).result
    assert result is not None and first_call(view).result_source == "reconciled"
    evidence = json.loads(result.content)
    assert (evidence["status"], evidence["verdict"]) == ("applied", "verified_applied")
    assert evidence["provider_refs"] == [f"ref-{operation_id(run_id, FIRST)}"]
    assert world.reconcile.asked == [operation_id(run_id, FIRST)]


@pytest.mark.parametrize("make", WRITES)
def test_a_write_the_provider_shows_not_applied_is_retried_through_the_gate(
        world: World, make: Make) -> None:
    tool = make(uses_key=True)  # a retry "with the same key" needs one (SPEC rule 6)
    run_id = crashed(world, tool, "delivered")
    world.reconcile.finds = "not_applied"
    view = take_over(world, tool, run_id)
    assert view.state is S.COMPLETED and first_call(view).result_source == "handler"
    first, retry = tool.calls
    assert (retry.attempt, retry.idempotency_key, retry.operation_id) == (
        2, first.idempotency_key, first.operation_id)
    facts = world.store.facts(operation_id(run_id, FIRST))
    assert [(a.number, a.outcome) for a in facts.attempts] == [
        (1, Outcome.TIMEOUT), (2, Outcome.RESPONSE)]


@pytest.mark.parametrize("make", WRITES)
def test_a_write_shown_not_applied_while_it_may_still_be_applied_is_not_retried(
        world: World, make: Make) -> None:
    # The field trial: a zero read while the provider was still applying the request opened a
    # retry, and nothing read the provider again. Here the provider may apply a request for
    # 30 s after its dispatch (inflight_s): the zero read at once proves nothing.
    tool = make(uses_key=True)
    assert tool.provider is not None
    world.store.put_contract(ProviderContract(tool.provider, idempotency_keys=True,
                                              inflight_s=30))
    run_id = crashed(world, tool, "delivered")
    world.reconcile.finds = "not_applied"
    view = take_over(world, tool, run_id)
    assert len(tool.calls) == 1 and view.state is S.AWAITING_APPROVAL
    op = operation_id(run_id, FIRST)
    early = world.ledger.judge(op).decision
    assert early.verdict is Verdict.INDETERMINATE and not early.retry_allowed
    assert verdicts.Finding.ZERO_NOT_CONCLUSIVE in early.findings
    # Read again after the settle time, the provider shows the request it applied late.
    world.clock.advance(31)
    world.reconcile.finds = "applied"
    judgement = world.reconcile(op)
    assert judgement is not None
    assert judgement.decision.verdict is Verdict.VERIFIED_APPLIED and len(tool.calls) == 1


@pytest.mark.parametrize(("finds", "verdict", "rounds"), [
    ("unavailable", "indeterminate", 2), ("busy", "indeterminate", 2),
    ("applied_twice", "duplicate_effect", 1)])
@pytest.mark.parametrize("make", WRITES)
def test_a_write_in_doubt_is_never_sent_blind_but_waits_for_a_human(
        world: World, make: Make, finds: Finding, verdict: str, rounds: int) -> None:
    tool = make()
    run_id = crashed(world, tool, "delivered")
    world.reconcile.finds = finds
    view = take_over(world, tool, run_id)
    assert view.state is S.AWAITING_APPROVAL and len(tool.calls) == 1
    assert [c.tool_call_id for c in view.pending_calls()] == [FIRST]
    approval = view.approval
    assert approval is not None and approval.tool_call_id == FIRST and approval.resume_token
    op = operation_id(run_id, FIRST)
    assert {k: approval.payload[k] for k in ("operation_id", "tool", "effect", "verdict")} == {
        "operation_id": op, "tool": tool.name, "effect": tool.effect.value, "verdict": verdict}
    # Probed until decided, for at most the test configuration's reconcile_rounds.
    assert world.reconcile.asked == [op] * rounds


@pytest.mark.parametrize("make", EVERY_EFFECT)
def test_a_call_requested_but_never_dispatched_runs_normally(world: World, make: Make) -> None:
    tool = make()
    view = take_over(world, tool, crashed(world, tool, "requested"))
    assert view.state is S.COMPLETED and len(tool.calls) == 1
    assert first_call(view).result_source == "handler" and world.reconcile.asked == []


def test_a_dispatch_cut_off_before_the_send_is_settled_by_evidence_not_assumed(
        world: World) -> None:
    """The worker died between recording the dispatch and sending: only the provider can say
    nothing was sent; here it shows the effect, so the handler is not run at all."""
    tool = send()
    view = take_over(world, tool, crashed(world, tool, "dispatched"))
    assert view.state is S.COMPLETED and tool.calls == []
    assert first_call(view).result_source == "reconciled"


def test_a_write_shown_not_applied_without_a_retry_grant_waits_for_a_human(
        world: World) -> None:
    tool = send(provider="nokeys")
    run_id = crashed(world, tool, "delivered")
    world.reconcile.finds = "not_applied"
    view = take_over(world, tool, run_id)
    assert view.state is S.AWAITING_APPROVAL and len(tool.calls) == 1
    assert view.approval is not None
    assert view.approval.payload["verdict"] == "verified_not_applied"
    assert "retry not allowed" in view.approval.payload["reason"]


def test_a_recorded_attempt_without_a_result_is_settled_by_evidence(world: World) -> None:
    tool = put()
    view = take_over(world, tool, crashed(world, tool, "attempt_recorded"))
    assert view.state is S.COMPLETED and len(tool.calls) == 1
    assert first_call(view).result_source == "reconciled"


@pytest.mark.parametrize("point", ["assistant_recorded", "requested"])
def test_calls_of_an_answer_recorded_before_a_crash_are_still_run(world: World,
                                                                  point: str) -> None:
    tools = [lookup(), send()]
    script = [call(tool_use("lookup", {"q": 1}), tool_use("send", {"to": "bob"})), say("done")]
    run_id = world.crashed_run(script, [t.tool for t in tools], point)
    view = run(world.runtime(script, [t.tool for t in tools]).advance(run_id, take_over=True))
    assert view.view.state is S.COMPLETED
    assert [len(t.calls) for t in tools] == [1, 1]
    assert result_keys(world.journal, run_id) == {(1, FIRST), (1, "toolu_s0_1")}


def test_a_model_answer_lost_in_a_crash_is_asked_for_again_in_the_same_turn(
        world: World) -> None:
    tool = lookup()
    view = take_over(world, tool, crashed(world, tool, "model_answered"))
    assert view.state is S.COMPLETED and view.turn == 2 and len(tool.calls) == 1
    turns = [e.data["turn"] for e in world.journal.events(view.run_id) if e.kind is EventKind.TURN]
    assert turns == [1, 2]
