"""Human approvals of a call whose effect the evidence could not settle: applied, not applied,
approve_retry, reject, and the approval timeout."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.core.domain import Approval, Resolution, Verdict
from reconciler.core.errors import ApprovalError
from reconciler.core.runs.events import RunView
from reconciler.core.runs.states import RunState
from reconciler.runtime.tools import operation_id

from runtime_harness import (
    FIRST,
    Crash,
    CrashAt,
    FakeTool,
    Finding,
    World,
    crashed,
    first_call,
    run,
    script_for,
    send,
    take_over,
)

S = RunState



def awaiting(world: World, tool: FakeTool, finds: Finding = "unavailable",
             **config: Any) -> RunView:
    """A run whose write is in doubt after a crash, waiting for a human."""
    run_id = crashed(world, tool, "delivered", **config)
    world.reconcile.finds = finds
    view = take_over(world, tool, run_id)
    assert view.state is S.AWAITING_APPROVAL and view.approval is not None
    return view


def decided(world: World, tool: FakeTool, view: RunView, decision: str,
            note: str = "checked") -> RunView:
    """The human's decision, then the run advanced by a worker."""
    assert view.approval is not None
    rt = world.runtime(script_for(tool), [tool.tool])
    rt.decide(view.run_id, view.approval.resume_token, decision, actor="ops", note=note)
    return run(rt.advance(view.run_id)).view


def test_a_call_decided_applied_continues_with_a_result_from_the_evidence(world: World) -> None:
    tool = send()
    view = decided(world, tool, awaiting(world, tool), "applied")
    assert view.state is S.COMPLETED and len(tool.calls) == 1
    assert first_call(view).result_source == "reconciled"
    [resolution] = world.store.facts(operation_id(view.run_id, FIRST)).of(Resolution)
    assert (resolution.verdict, resolution.actor) == (Verdict.VERIFIED_APPLIED, "ops")


def test_a_call_decided_not_applied_is_retried_through_the_gate(world: World) -> None:
    tool = send(uses_key=True)
    view = decided(world, tool, awaiting(world, tool), "not_applied")
    assert view.state is S.COMPLETED and [c.attempt for c in tool.calls] == [1, 2]
    facts = world.store.facts(operation_id(view.run_id, FIRST))
    assert [r.verdict for r in facts.of(Resolution)] == [Verdict.VERIFIED_NOT_APPLIED]
    assert len(facts.of(Approval)) == 1


def test_a_decision_does_not_overrule_the_retry_gate(world: World) -> None:
    tool = send(provider="nokeys")
    before = awaiting(world, tool)
    view = decided(world, tool, before, "not_applied")
    assert view.state is S.AWAITING_APPROVAL and len(tool.calls) == 1
    assert view.approval is not None and before.approval is not None
    assert view.approval.resume_token != before.approval.resume_token


def test_a_call_without_a_key_is_not_retried_even_when_decided_not_applied(
        world: World) -> None:
    """No key, no retry (SPEC rule 6): the human's not_applied opens nothing; the run waits."""
    tool = send()
    before = awaiting(world, tool)
    view = decided(world, tool, before, "not_applied")
    assert view.state is S.AWAITING_APPROVAL and len(tool.calls) == 1
    assert view.approval is not None
    assert "intent_without_key" in view.approval.payload["findings"]


def test_a_call_that_cannot_be_compensated_is_retried_once_a_human_approves(
        world: World) -> None:
    """Approved before it is first sent (compensable: false), and again before a retry."""
    tool = send(provider="bank", uses_key=True)
    rt = world.runtime(script_for(tool), [tool.tool], hook=CrashAt("delivered"))
    run_id = world.start(rt)
    first = run(rt.advance(run_id)).view
    assert first.approval is not None and tool.calls == []
    assert first.approval.payload["kind"] == "before_dispatch"
    assert "compensable: false" in first.approval.payload["reason"]
    rt.decide(run_id, first.approval.resume_token, "approve", actor="ops")
    with pytest.raises(Crash):
        run(rt.advance(run_id))
    world.reconcile.finds = "not_applied"
    view = take_over(world, tool, run_id)
    assert view.approval is not None
    assert view.approval.payload["next_action"] == "await_approval"
    view = decided(world, tool, view, "approve_retry")
    assert view.state is S.COMPLETED and [c.attempt for c in tool.calls] == [1, 2]


def test_a_rejected_call_is_not_run_and_the_model_is_told(world: World) -> None:
    tool = send()
    view = decided(world, tool, awaiting(world, tool), "reject", note="wrong recipient")
    assert view.state is S.COMPLETED and len(tool.calls) == 1
    result = first_call(view).result
    assert result is not None and first_call(view).result_source == "rejected"
    assert result.content == "Rejected by ops: wrong recipient. The call was not run."


def test_a_decision_needs_the_pending_resume_token_and_a_known_decision(world: World) -> None:
    tool = send()
    view = awaiting(world, tool)
    assert view.approval is not None
    rt = world.runtime(script_for(tool), [tool.tool])
    before = world.journal.events(view.run_id)
    with pytest.raises(ApprovalError, match="resume token"):
        rt.decide(view.run_id, "not-the-token", "applied", actor="ops")
    with pytest.raises(ApprovalError, match="decision must be one of"):
        rt.decide(view.run_id, view.approval.resume_token, "maybe", actor="ops")
    assert world.journal.events(view.run_id) == before


def test_an_approval_left_past_its_timeout_times_the_run_out(world: World) -> None:
    tool = send()
    view = awaiting(world, tool, approval_timeout_s=60)
    assert view.approval is not None
    world.clock.advance(61)
    rt = world.runtime(script_for(tool), [tool.tool])
    with pytest.raises(ApprovalError):
        rt.decide(view.run_id, view.approval.resume_token, "applied", actor="late")
    assert world.journal.load(view.run_id).state is S.TIMED_OUT
    assert world.store.facts(operation_id(view.run_id, FIRST)).of(Resolution) == []


def test_a_timed_out_run_resumes_through_recovery(world: World) -> None:
    tool = send()
    view = awaiting(world, tool, approval_timeout_s=60)
    world.clock.advance(61)
    rt = world.runtime(script_for(tool), [tool.tool])
    assert run(rt.advance(view.run_id)).view.state is S.TIMED_OUT
    world.reconcile.finds = "applied"
    view = run(rt.resume(view.run_id)).view
    assert view.state is S.COMPLETED and len(tool.calls) == 1
    assert first_call(view).result_source == "reconciled"


def test_a_call_the_sweep_later_proves_applied_moves_on_without_a_human(world: World) -> None:
    tool = send()
    view = awaiting(world, tool)
    op = operation_id(view.run_id, FIRST)
    world.reconcile.finds = "applied"
    world.reconcile(op)  # what a sweep round records while the run waits
    rt = world.runtime(script_for(tool), [tool.tool])
    assert rt.get(view.run_id).state is not S.AWAITING_APPROVAL
    done = run(rt.advance(view.run_id)).view
    assert done.state is S.COMPLETED and len(tool.calls) == 1
    assert first_call(done).result_source == "reconciled"
    decided_by = [e.data["actor"] for e in world.journal.events(view.run_id)
                  if e.kind.value == "approval_decided"]
    assert decided_by == ["reconciler (evidence)"]
    assert world.store.facts(op).of(Resolution) == []  # no human said anything


def test_a_call_later_found_applied_twice_makes_the_completed_run_unhealthy(
        world: World) -> None:
    tool = send()
    view = decided(world, tool, awaiting(world, tool), "applied")
    rt = world.runtime(script_for(tool), [tool.tool])
    assert view.state is S.COMPLETED and rt.unhealthy(view.run_id) == []
    op = operation_id(view.run_id, FIRST)
    world.reconcile.finds = "applied_twice"
    world.reconcile(op)
    [unhealthy] = rt.unhealthy(view.run_id)
    assert (unhealthy.operation_id, unhealthy.verdict) == (op, "duplicate_effect")
    assert rt.get(view.run_id).state is S.COMPLETED
