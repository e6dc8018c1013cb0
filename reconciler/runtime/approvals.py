"""Human approvals of a run's tool calls: when the run loop asks for one, what a human may
decide, and how a decision, the evidence or the approval timeout settles it.

    before a first send:  tool needs approval, or provider cannot undo it ─▶ approve | reject
    after a send in doubt (the tool gate asks) ─▶ applied | not_applied | approve_retry | reject
    meanwhile:  the evidence shows it applied ─▶ decided "applied" by the evidence
                no decision within approval_timeout_s ─▶ the run times out
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import timedelta

from reconciler.core.domain import Approval, Effect, Resolution, Verdict
from reconciler.core.errors import ApprovalError, DecisionNotAllowedError
from reconciler.core.ports import Journal
from reconciler.core.runs.events import CallView, EventKind, PendingApproval, RunView
from reconciler.core.runs.states import RunState
from reconciler.ledger import Ledger
from reconciler.runtime.guards import RunConfig
from reconciler.runtime.toolgate import ToolGate
from reconciler.runtime.tools import Tool

#: What a human may decide about a call whose effect the evidence could not settle.
DECISIONS = ("applied", "not_applied", "approve_retry", "reject")
#: What a human may decide about a call that asks for approval before it is first sent.
FIRST_DECISIONS = ("approve", "reject")
#: The approval payload's `kind` for a call not sent yet (the others follow a dispatch).
BEFORE_DISPATCH = "before_dispatch"
#: Who decided a pending approval that the evidence settled before any human did.
EVIDENCE_ACTOR = "reconciler (evidence)"


def decisions_for(pending: PendingApproval) -> tuple[str, ...]:
    """What a human may decide about the call a pending approval asks about: a call not sent
    yet is approved or rejected; one sent already is decided from what happened."""
    return FIRST_DECISIONS if pending.payload.get("kind") == BEFORE_DISPATCH else DECISIONS


class Approvals:
    """Asks for, records and reviews the approvals of one worker's runs (`AgentRuntime`)."""

    def __init__(self, journal: Journal, ledger: Ledger, toolgate: ToolGate,
                 tools: Mapping[str, Tool]) -> None:
        self.journal = journal
        self.ledger = ledger
        self.toolgate = toolgate
        self.tools = tools

    def needed(self, view: RunView, call: CallView) -> str | None:
        """Why a human must approve the call before its first dispatch, or None."""
        tool = self.tools.get(call.name)
        if tool is None or call.dispatches or call.tool_call_id in view.approved_calls:
            return None
        if tool.needs_approval:
            return f"tool {call.name!r} runs only with a human's approval"
        if (tool.effect is not Effect.READ_ONLY and tool.provider is not None
                and not self.ledger.store.contract(tool.provider).compensable):
            return (f"provider {tool.provider!r} cannot undo this ({call.effect}, compensable: "
                    "false): a human approves it before it is sent")
        return None

    def request(self, view: RunView, call: CallView, reason: str) -> RunView:
        """The run waits for a human to approve the call before it is first sent."""
        return self.journal.append(view, EventKind.APPROVAL_REQUESTED, {
            "turn": call.turn, "tool_call_id": call.tool_call_id,
            "resume_token": uuid.uuid4().hex,
            "payload": {"kind": BEFORE_DISPATCH, "tool": call.name, "effect": call.effect,
                        "operation_id": call.operation_id, "input": dict(call.input),
                        "arguments_hash": call.arguments_hash, "reason": reason,
                        "decisions": list(FIRST_DECISIONS)}}, self.ledger.clock())

    def decide(self, view: RunView, resume_token: str, decision: str, *, actor: str,
               note: str = "") -> RunView:
        """A human's decision on the call the run waits for.

        applied: the provider did it (recorded as a human resolution; the run continues with a
        result from the evidence). not_applied: it did not; a retry is approved (the retry gate
        still decides). approve_retry: approval alone, for a call that cannot be compensated.
        reject: the call is not run; the model is told so."""
        pending = view.approval
        if pending is None or pending.resume_token != resume_token:
            raise ApprovalError(view.run_id, "no pending approval has this resume token")
        allowed = decisions_for(pending)
        if decision not in allowed:
            raise DecisionNotAllowedError(view.run_id, f"decision must be one of "
                                          f"{', '.join(allowed)} for this call")
        call = view.calls[pending.tool_call_id]
        op, now = call.operation_id, self.ledger.clock()
        if op is not None and decision == "applied":
            self.ledger.record_evidence(Resolution(op, now, Verdict.VERIFIED_APPLIED, actor, note))
        if op is not None and decision == "not_applied":
            self.ledger.record_evidence(
                Resolution(op, now, Verdict.VERIFIED_NOT_APPLIED, actor, note))
        if op is not None and decision in ("not_applied", "approve_retry"):
            self.ledger.record_evidence(Approval(op, now, actor, note))
        view = self.journal.append(view, EventKind.APPROVAL_DECIDED, {
            "tool_call_id": call.tool_call_id, "decision": decision, "actor": actor,
            "note": note}, now)
        if decision == "reject":
            view = self.toolgate.error_result(
                view, call, f"Rejected by {actor}: {note or 'no reason'}. The call was not run.",
                "rejected")
        return view

    def review(self, view: RunView, config: RunConfig) -> RunView:
        """A run waits for a human on a call whose effect was in doubt. If the evidence has
        since shown it applied (the sweep probed it), no human is needed; past the approval
        timeout, the run times out."""
        pending = view.approval
        if pending is None or view.state is not RunState.AWAITING_APPROVAL:
            return view
        operation = view.calls[pending.tool_call_id].operation_id
        sent = pending.payload.get("kind") != BEFORE_DISPATCH  # nothing to find otherwise
        if sent and operation is not None and (self.ledger.judge(operation).decision.verdict
                                      is Verdict.VERIFIED_APPLIED):
            return self.journal.append(view, EventKind.APPROVAL_DECIDED, {
                "tool_call_id": pending.tool_call_id, "decision": "applied",
                "actor": EVIDENCE_ACTOR, "note": "the provider shows the call took effect"},
                self.ledger.clock())
        if self.ledger.clock() - pending.requested_at < timedelta(
                seconds=config.approval_timeout_s):
            return view
        return self.journal.append(view, EventKind.TIMED_OUT, {
            "reason": f"no decision on tool call {pending.tool_call_id} within "
                      f"{config.approval_timeout_s:g}s", "tool_call_id": pending.tool_call_id},
            self.ledger.clock())
