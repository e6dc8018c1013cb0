"""A run's page and the decision on the call it waits for.

A call waits for a human in one of two ways, and the page offers exactly the decisions the
runtime takes for each (runtime.approvals.decisions_for):

    before its first send  (a tool marked needs_approval, a provider with compensable = false)
                           approve (it is sent, for the first time) or reject
    after a send whose effect the evidence could not settle
                           it happened, it did not (send again), approve a re-send, reject
"""

from __future__ import annotations

from contextlib import suppress

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from reconciler.core.errors import ReconcilerError, RunConflictError
from reconciler.core.runs.events import RunView
from reconciler.runtime.approvals import BEFORE_DISPATCH, decisions_for
from reconciler.service.ui.inputs import RunForm, RunPage
from reconciler.service.ui.pages import (
    checked_form,
    console_router,
    journal_here,
    message,
    q,
    query,
    render,
)

router = console_router()

#: How long a confirmed run decision works on the run before the page answers.
RUN_DEADLINE_S = 20.0

#: Each decision's label, and what confirming it does.
RUN_ACTIONS = {
    "approve": ("Approve: send it (its first send)", "the call is sent for the first time (it "
                "has never been sent), once, and the run goes on"),
    "applied": ("The call happened", "the call is taken as done: its result comes from the "
                "provider's evidence, and the run goes on"),
    "not_applied": ("The call did not happen: send it again", "the call is sent again, once "
                    "(the retry gate still decides), then the run goes on"),
    "approve_retry": ("Approve a re-send", "a re-send is approved without saying what "
                      "happened; the retry gate decides whether it goes out"),
    "reject": ("Reject the call", "the call is not run; the model is told it was refused "
               "and the run goes on"),
}


def _offered(view: RunView) -> dict[str, str]:
    """The decisions on the call `view` waits for, with their labels (none: it waits for
    none)."""
    if view.approval is None:
        return {}
    return {d: RUN_ACTIONS[d][0] for d in decisions_for(view.approval)}


def _load(request: Request, run_id: str) -> RunView | Response:
    """The run as its events say it is, or the page saying there is no such run."""
    try:
        return journal_here(request).load(run_id)
    except ReconcilerError as exc:
        return message(request, 404, "No such run", str(exc))


@router.get("/run")
def run_page(request: Request) -> Response:
    page = query(request, RunPage)
    if isinstance(page, Response):
        return page
    view = _load(request, page.id)
    if isinstance(view, Response):
        return view
    events = journal_here(request).events(page.id)
    pending = view.calls.get(view.approval.tool_call_id) if view.approval else None
    first_send = view.approval is not None and view.approval.payload.get(
        "kind") == BEFORE_DISPATCH
    return render(request, "run.html", run=view, events=events, pending=pending,
                  actions=_offered(view), first_send=first_send,
                  can_decide=request.app.state.runs is not None)


async def _run_decision(request: Request) -> tuple[str, RunForm] | Response:
    """The operator and the checked form of a decision on a run, or the answer that refuses
    it: the run must wait for this very approval (its resume token), and the decision must be
    one the runtime takes for that call."""
    checked = await checked_form(request, RunForm)
    if isinstance(checked, Response):
        return checked
    _, form = checked
    view = _load(request, form.id)
    if isinstance(view, Response):
        return view
    if view.approval is None or view.approval.resume_token != form.resume_token:
        return message(request, 409, "Not waiting for this decision",
                       "The run no longer waits for the call this form was for: open the "
                       "run's page again.")
    offered = _offered(view)
    if form.action not in offered:
        return message(request, 422, "Not a decision for this call",
                       f"choose one of: {', '.join(offered)}")
    return checked


@router.post("/run/decide")
async def run_decide(request: Request) -> Response:
    checked = await _run_decision(request)
    if isinstance(checked, Response):
        return checked
    _, form = checked
    label, what = RUN_ACTIONS[form.action]
    return render(request, "confirm.html", target="run", id=form.id, action=form.action,
                  label=label, note=form.note, resume_token=form.resume_token,
                  next=f"If you confirm, {what}.")


@router.post("/run/confirm")
async def run_confirm(request: Request) -> Response:
    checked = await _run_decision(request)
    if isinstance(checked, Response):
        return checked
    operator, form = checked
    runs = request.app.state.runs
    if runs is None:
        return message(request, 409, "Not recorded", "decisions on runs need the sidecar that "
                       "runs the agent (start it with --agent)")
    try:
        runs.runtime.decide(form.id, form.resume_token, form.action, actor=operator,
                            note=form.note)
    except ReconcilerError as exc:
        return message(request, 409, "Not recorded", str(exc))
    # Recorded; if another worker holds the run, it carries the decision out (as with
    # POST /v1/runs/{id}/approve).
    with suppress(RunConflictError):
        await runs.runtime.advance(form.id, deadline=runs.runtime.monotonic() + RUN_DEADLINE_S)
    return RedirectResponse(f"/ui/run?id={q(form.id)}", status_code=303)
