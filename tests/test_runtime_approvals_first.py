"""Approval before the first dispatch: a tool marked `needs_approval`, or a side effect at a
provider whose contract says `compensable: false`, pauses the run in awaiting_approval with the
call and a resume token before anything is sent; `approve` sends it, `reject` tells the model.
"""

from __future__ import annotations

import dataclasses

import pytest

from reconciler.core.errors import ApprovalError
from reconciler.core.runs.states import RunState
from reconciler.runtime.tools import Tool

from runtime_harness import FakeTool, World, first_call, lookup, run, script_for, send

S = RunState


def asking(tool: FakeTool) -> Tool:
    return dataclasses.replace(tool.tool, needs_approval=True)


def test_a_needs_approval_tool_pauses_before_its_first_dispatch(world: World) -> None:
    tool = lookup()
    rt = world.runtime(script_for(tool), [asking(tool)])
    view = run(rt.advance(world.start(rt))).view
    assert view.state is S.AWAITING_APPROVAL and tool.calls == []
    assert view.approval is not None and view.approval.resume_token
    payload = view.approval.payload
    assert (payload["kind"], payload["tool"], payload["decisions"]) == (
        "before_dispatch", "lookup", ["approve", "reject"])
    assert payload["input"] == dict(first_call(view).input)
    assert first_call(view).dispatches == 0


def test_an_approved_call_is_sent_once_and_the_run_goes_on(world: World) -> None:
    tool = send()
    rt = world.runtime(script_for(tool), [asking(tool)])
    paused = run(rt.advance(world.start(rt))).view
    assert paused.approval is not None
    rt.decide(paused.run_id, paused.approval.resume_token, "approve", actor="ops")
    view = run(rt.advance(paused.run_id)).view
    assert view.state is S.COMPLETED and len(tool.calls) == 1
    assert first_call(view).result_source == "handler"


def test_a_rejected_call_is_never_sent(world: World) -> None:
    tool = send()
    rt = world.runtime(script_for(tool), [asking(tool)])
    paused = run(rt.advance(world.start(rt))).view
    assert paused.approval is not None
    rt.decide(paused.run_id, paused.approval.resume_token, "reject", actor="ops", note="no")
    view = run(rt.advance(paused.run_id)).view
    assert view.state is S.COMPLETED and tool.calls == []
    assert first_call(view).result_source == "rejected"


def test_only_approve_or_reject_decide_a_call_not_sent_yet(world: World) -> None:
    tool = send()
    rt = world.runtime(script_for(tool), [asking(tool)])
    paused = run(rt.advance(world.start(rt))).view
    assert paused.approval is not None
    with pytest.raises(ApprovalError, match="approve, reject"):
        rt.decide(paused.run_id, paused.approval.resume_token, "applied", actor="ops")
    assert world.journal.load(paused.run_id).state is S.AWAITING_APPROVAL


def test_a_non_compensable_provider_action_asks_first_without_the_tool_saying_so(
        world: World) -> None:
    tool = send(provider="bank", uses_key=True)
    rt = world.runtime(script_for(tool), [tool.tool])
    view = run(rt.advance(world.start(rt))).view
    assert view.state is S.AWAITING_APPROVAL and tool.calls == []
    assert view.approval is not None and "'bank'" in view.approval.payload["reason"]


def test_tools_without_the_policy_run_at_once(world: World) -> None:
    tool = send()
    rt = world.runtime(script_for(tool), [tool.tool])
    view = run(rt.advance(world.start(rt))).view
    assert view.state is S.COMPLETED and len(tool.calls) == 1
