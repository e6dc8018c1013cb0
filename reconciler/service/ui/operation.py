"""An operation's page and the decisions on it.

What a person may decide depends on the operation: a `duplicate_effect` is never retried nor
resolved away (a resolution would erase that two effects happened): its extra effect is
compensated at the provider and the compensation recorded (actor, note, its reference), which
takes it off the queue while the verdict stays; a retry is approved only for a provider whose
actions cannot be compensated (SPEC section 4: only those need it). The page says which effect
the worker received (the reference in its own response), and why its tables stay empty when no
configured probe can see the action (SPEC section 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from probes.base import Probe, sight_of
from reconciler.core.domain import (
    Approval,
    Compensation,
    Decision,
    Facts,
    ProviderContract,
    Resolution,
    Verdict,
)
from reconciler.core.errors import ReconcilerError
from reconciler.core.sight import Blind, blind_to
from reconciler.core.summary import summarize
from reconciler.core.verdicts import NextAction
from reconciler.service.ui.inputs import OperationForm, OperationPage
from reconciler.service.ui.pages import (
    checked_form,
    console_router,
    message,
    q,
    query,
    render,
    wiring_of,
)
from reconciler.service.ui.timeline import timeline_svg
from reconciler.service.views import operation_out

router = console_router()

#: What a person may decide about an operation.
RESOLVE = {
    "resolve_applied": "Resolve: the effect happened (verified_applied)",
    "resolve_not_applied": "Resolve: the effect did not happen (verified_not_applied)",
}
APPROVE = {"approve_retry": "Approve a retry (the action cannot be compensated)"}
COMPENSATE = {"compensate": "Record a compensation: the extra effect was undone at the "
                            "provider (refunded, cancelled, deleted)"}
OPERATION_ACTIONS = {**RESOLVE, **APPROVE, **COMPENSATE}


def actions_for(decision: Decision, contract: ProviderContract) -> dict[str, str]:
    """The decisions the page offers: for a duplicate, only recording its compensation (once
    per set of effects), nothing that retries or resolves it away; elsewhere the resolutions,
    and an approval only where the provider's contract needs one."""
    if decision.verdict is Verdict.DUPLICATE_EFFECT:
        return COMPENSATE if decision.next_action == NextAction.COMPENSATE else {}
    return {**RESOLVE, **({} if contract.compensable else APPROVE)}


def received_refs(facts: Facts) -> frozenset[str]:
    """The references the worker got back in its own responses (its attempts' receipts)."""
    return frozenset(a.receipt.provider_ref for a in facts.attempts if a.receipt is not None)


@dataclass(frozen=True, slots=True)
class Unseen:
    """Why no configured probe can see an operation's action, and what to configure."""

    why: list[str]
    fix: str


def unseen(facts: Facts, probes: Sequence[Probe]) -> Unseen | None:
    """None when a probe of the provider could see the effect (SPEC section 3's scope and
    correlation); else each probe's reason."""
    intent = facts.intent
    received = bool(received_refs(facts))
    blind = [(probe.name, blind_to(sight_of(probe), intent, ref_returned=lambda: received))
             for probe in probes]
    if any(why is None for _, why in blind):
        return None
    carried = (", ".join(sorted(intent.carried))
               or "nothing today: send the key or attach the operation id")
    fix = (f"Configure a probe under [providers.{intent.provider}] whose `actions` name "
           f"{intent.action!r} and that reads by something its requests carry ({carried}); "
           "`reconciler check-config` lists every action no probe sees.")
    if not blind:
        return Unseen([f"provider {intent.provider!r} has no probe configured on this "
                       "sidecar: nothing reads the provider, so no zero and no effect is "
                       "ever seen"], fix)
    return Unseen([f"probe {name!r} " + ("does not cover action " f"{intent.action!r}"
                                          if why is Blind.SCOPE else
                                          "finds effects by something the request did not "
                                          "carry") + ": its empty reads prove nothing"
                   for name, why in blind], fix)


@router.get("/operation")
def operation_page(request: Request) -> Response:
    page = query(request, OperationPage)
    if isinstance(page, Response):
        return page
    wiring = wiring_of(request)
    try:
        judgement = wiring.ledger.judge(page.id)
    except ReconcilerError as exc:
        return message(request, 404, "No such operation", str(exc))
    facts = judgement.facts
    contract = wiring.store.contract(facts.intent.provider)
    summary = summarize(facts)
    return render(request, "operation.html", op=operation_out(judgement, judgement.escalated),
                  contract=contract, done=OPERATION_ACTIONS.get(page.done),
                  actions=actions_for(judgement.decision, contract),
                  effects=sorted(summary.refs), received=received_refs(facts),
                  unseen=unseen(facts, wiring.sweeper.probes_for(facts.intent.provider)),
                  timeline=timeline_svg(facts, contract, judgement.at))


@dataclass(frozen=True)
class _OperationDecision:
    """A decision form on an operation, checked: its id, action, note and the evidence that
    confirming it records."""

    op_id: str
    action: str
    note: str
    reference: str
    evidence: Resolution | Approval | Compensation


async def _operation_decision(request: Request) -> _OperationDecision | Response:
    """The decision a POSTed operation form asks for, or the answer that refuses it: one
    reading for the step that previews it and the step that records it. A decision the
    operation's page does not offer (a retry of a duplicate) is refused here too."""
    checked = await checked_form(request, OperationForm)
    if isinstance(checked, Response):
        return checked
    operator, form = checked
    wiring = wiring_of(request)
    try:
        facts = wiring.store.facts(form.id)
    except ReconcilerError as exc:
        return message(request, 404, "No such operation", str(exc))
    offered = actions_for(wiring.ledger.judge(form.id).decision,
                          wiring.store.contract(facts.intent.provider))
    if form.action not in offered:
        return message(request, 422, "Not a decision for this operation",
                       "choose one of: " + (", ".join(offered) or "none (see the page)"))
    at = wiring.ledger.clock()
    evidence: Resolution | Approval | Compensation
    if form.action == "compensate":
        if not form.reference:
            return message(request, 422, "Not accepted", "reference: the compensation's "
                           "reference at the provider (the refund's, the cancellation's) is "
                           "required")
        evidence = Compensation(form.id, at, operator, form.note, form.reference)
    elif form.action == "approve_retry":
        evidence = Approval(form.id, at, operator, form.note)
    else:
        evidence = Resolution(form.id, at, Verdict.VERIFIED_APPLIED
                              if form.action == "resolve_applied"
                              else Verdict.VERIFIED_NOT_APPLIED, operator, form.note)
    return _OperationDecision(form.id, form.action, form.note, form.reference or "", evidence)


@router.post("/operation/decide")
async def operation_decide(request: Request) -> Response:
    decision = await _operation_decision(request)
    if isinstance(decision, Response):
        return decision
    preview = wiring_of(request).ledger.preview(decision.op_id, decision.evidence)
    return render(request, "confirm.html", target="operation", id=decision.op_id,
                  action=decision.action, label=OPERATION_ACTIONS[decision.action],
                  note=decision.note, reference=decision.reference, next=_next_for(preview))


def _next_for(decision: Decision) -> str:
    retry = ("the retry gate will grant one retry, with the same key, to the first caller "
             "that asks" if decision.retry_allowed else "no retry will be granted")
    if decision.next_action == NextAction.COMPENSATED:
        return (f"The verdict stays {decision.verdict.value} (both effects happened), next "
                f"action {decision.next_action}: {retry}, and the operation leaves the queue. "
                "A further effect at the provider puts it back.")
    return (f"The verdict becomes {decision.verdict.value}, next action "
            f"{decision.next_action}: {retry}. Later proof from the provider (a new attempt, "
            "receipt, match or conclusive zero) still supersedes a human's resolution.")


@router.post("/operation/confirm")
async def operation_confirm(request: Request) -> Response:
    decision = await _operation_decision(request)
    if isinstance(decision, Response):
        return decision
    wiring_of(request).ledger.record_evidence(decision.evidence)
    return RedirectResponse(f"/ui/operation?id={q(decision.op_id)}&done={decision.action}",
                            status_code=303)
