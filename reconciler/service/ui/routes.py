"""The console's pages and forms. Every page needs an operator's session (else: to the login
page); every POST needs the session's CSRF token (else: 403, nothing recorded). A decision is
two steps: the form says what to do, a confirmation page says what will happen next, and only
the confirmed form records it, with the operator's name from the session, never from a field.

Operation and run ids go in the query (`?id=`), not the path: operation ids may hold `/`.
"""

from __future__ import annotations

import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from reconciler.domain import Approval, Resolution, Verdict
from reconciler.errors import ReconcilerError, RunConflictError
from reconciler.ports import Journal
from reconciler.runs.states import RunState
from reconciler.service.credentials import Keyring
from reconciler.service.ui.access import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    SESSION_S,
    Access,
    access_of,
    csrf_ok,
)
from reconciler.service.ui.queue import age, needs_a_human
from reconciler.service.ui.timeline import timeline_svg
from reconciler.service.views import operation_out
from reconciler.service.wiring import Wiring
from reconciler.store.schema import journal_of

templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
router = APIRouter(prefix="/ui", include_in_schema=False)
PAGE = 50
#: How long a confirmed run decision works on the run before the page answers.
RUN_DEADLINE_S = 20.0

#: What a person may decide about an operation, and what the evidence it records is.
OPERATION_ACTIONS = {
    "resolve_applied": "Resolve: the effect happened (verified_applied)",
    "resolve_not_applied": "Resolve: the effect did not happen (verified_not_applied)",
    "approve_retry": "Approve a retry (the action cannot be compensated)",
}
RUN_ACTIONS = {
    "applied": ("The call happened", "the call is taken as done: its result comes from the "
                "provider's evidence, and the run goes on"),
    "not_applied": ("The call did not happen: send it again", "the call is sent again, once "
                    "(the retry gate still decides), then the run goes on"),
    "approve_retry": ("Approve a re-send", "a re-send is approved without saying what "
                      "happened; the retry gate decides whether it goes out"),
    "reject": ("Reject the call", "the call is not run; the model is told it was refused "
               "and the run goes on"),
}


def install_console(app: FastAPI, keyring: Keyring) -> None:
    app.state.console_access = Access(keyring)
    app.include_router(router)


def _wiring(request: Request) -> Wiring:
    wiring: Wiring = request.app.state.wiring
    return wiring


def _journal(request: Request) -> Journal | None:
    try:
        return journal_of(_wiring(request).store)
    except TypeError:
        return None


def _render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    session = access_of(request).session(request)
    return templates.TemplateResponse(request, name, {
        "operator": session.operator if session else None,
        "csrf": session.csrf if session else "", "now": _wiring(request).ledger.clock(),
        "age": age, **context}, status_code=status)


def _to_login() -> RedirectResponse:
    return RedirectResponse("/ui/login", status_code=303)


async def _form(request: Request) -> dict[str, str]:
    form = await request.form()
    return {k: v for k, v in form.items() if isinstance(v, str)}


async def _checked_form(request: Request) -> tuple[str, dict[str, str]] | Response:
    """The operator and the form of a POST, or the answer that refuses it."""
    session = access_of(request).session(request)
    if session is None:
        return _render(request, "message.html", 403, title="Not signed in",
                       message="Sign in as an operator first.")
    form = await _form(request)
    if not csrf_ok(session.csrf, form.get("csrf")):
        return _render(request, "message.html", 403, title="Refused",
                       message="The form's CSRF token is missing or wrong: nothing was "
                       "recorded. Open the page again and resend the form.")
    return session.operator, form


# -- signing in -------------------------------------------------------------------------------


@router.get("")
def home() -> RedirectResponse:
    return RedirectResponse("/ui/queue", status_code=303)


@router.get("/login")
def login_page(request: Request) -> HTMLResponse:
    token = Access.new_login_token()
    page = _render(request, "login.html", login_csrf=token,
                   needs_credential=access_of(request).needs_credential())
    page.set_cookie(LOGIN_COOKIE, token, max_age=600, httponly=True, samesite="strict",
                    path="/ui")
    return page


@router.post("/login")
async def login(request: Request) -> Response:
    form = await _form(request)
    if not csrf_ok(request.cookies.get(LOGIN_COOKIE, ""), form.get("csrf")):
        return _render(request, "message.html", 403, title="Refused",
                       message="The login form expired or lacks its CSRF token: open the "
                       "login page again.")
    access = access_of(request)
    name = access.credential_name(form.get("credential", ""))
    if name is None:
        token = Access.new_login_token()
        page = _render(request, "login.html", 401, login_csrf=token, needs_credential=True,
                       error="That is not an operator credential.")
        page.set_cookie(LOGIN_COOKIE, token, max_age=600, httponly=True, samesite="strict",
                        path="/ui")
        return page
    answer = RedirectResponse("/ui/queue", status_code=303)
    answer.set_cookie(SESSION_COOKIE, access.session_cookie(name), max_age=SESSION_S,
                      httponly=True, samesite="strict", path="/ui",
                      secure=request.url.scheme == "https")
    answer.delete_cookie(LOGIN_COOKIE, path="/ui")
    return answer


@router.post("/logout")
async def logout(request: Request) -> Response:
    checked = await _checked_form(request)
    if isinstance(checked, Response):
        return checked
    answer = RedirectResponse("/ui/login", status_code=303)
    answer.delete_cookie(SESSION_COOKIE, path="/ui")
    return answer


# -- pages ------------------------------------------------------------------------------------


@router.get("/queue")
def queue_page(request: Request) -> Response:
    if access_of(request).session(request) is None:
        return _to_login()
    items = needs_a_human(_wiring(request).store, _journal(request))
    return _render(request, "queue.html", items=items)


def _flag(value: str | None) -> bool | None:
    return {"true": True, "false": False}.get(value or "")


@router.get("/operations")
def operations_page(request: Request, verdict: str | None = None, provider: str | None = None,
                    escalated: str | None = None, after: str | None = None) -> Response:
    if access_of(request).session(request) is None:
        return _to_login()
    verdict = verdict if verdict in {v.value for v in Verdict} else None
    page = _wiring(request).store.list_operations(
        verdict=verdict, provider=provider or None, escalated=_flag(escalated),
        after=after or None, limit=PAGE + 1)
    more = len(page) > PAGE
    return _render(request, "operations.html", items=page[:PAGE],
                   next_cursor=page[PAGE - 1].operation_id if more else None,
                   verdicts=[v.value for v in Verdict],
                   filters={"verdict": verdict or "", "provider": provider or "",
                            "escalated": escalated or ""})


@router.get("/operation")
def operation_page(request: Request, id: str, done: str | None = None) -> Response:
    if access_of(request).session(request) is None:
        return _to_login()
    wiring = _wiring(request)
    try:
        judgement = wiring.ledger.judge(id)
    except ReconcilerError as exc:
        return _render(request, "message.html", 404, title="No such operation",
                       message=str(exc))
    facts = judgement.facts
    contract = wiring.store.contract(facts.intent.provider)
    return _render(request, "operation.html", op=operation_out(judgement, judgement.escalated),
                   contract=contract, actions=OPERATION_ACTIONS, done=done,
                   timeline=timeline_svg(facts, contract, judgement.at))


@dataclass(frozen=True)
class _OperationDecision:
    """A decision form on an operation, checked: its id, action, note and the evidence that
    confirming it records."""

    op_id: str
    action: str
    note: str
    evidence: Resolution | Approval


async def _operation_decision(request: Request) -> _OperationDecision | Response:
    """The decision a POSTed operation form asks for, or the answer that refuses it: one
    reading for the step that previews it and the step that records it."""
    checked = await _checked_form(request)
    if isinstance(checked, Response):
        return checked
    operator, form = checked
    op_id, action, note = form.get("id", ""), form.get("action", ""), form.get("note", "")
    if action not in OPERATION_ACTIONS:
        return _render(request, "message.html", 422, title="Unknown decision",
                       message=f"choose one of: {', '.join(OPERATION_ACTIONS)}")
    at = _wiring(request).ledger.clock()
    evidence: Resolution | Approval
    if action == "approve_retry":
        evidence = Approval(op_id, at, operator, note)
    else:
        evidence = Resolution(op_id, at, Verdict.VERIFIED_APPLIED if action == "resolve_applied"
                              else Verdict.VERIFIED_NOT_APPLIED, operator, note)
    return _OperationDecision(op_id, action, note, evidence)


@router.post("/operation/decide")
async def operation_decide(request: Request) -> Response:
    decision = await _operation_decision(request)
    if isinstance(decision, Response):
        return decision
    try:
        preview = _wiring(request).ledger.preview(decision.op_id, decision.evidence)
    except ReconcilerError as exc:
        return _render(request, "message.html", 404, title="No such operation",
                       message=str(exc))
    return _render(request, "confirm.html", target="operation", id=decision.op_id,
                   action=decision.action, label=OPERATION_ACTIONS[decision.action],
                   note=decision.note, next=_next_for(preview))


def _next_for(decision: Any) -> str:
    retry = ("the retry gate will grant one retry, with the same key, to the first caller "
             "that asks" if decision.retry_allowed else "no retry will be granted")
    return (f"The verdict becomes {decision.verdict.value}, next action "
            f"{decision.next_action}: {retry}. Later proof from the provider (a new attempt, "
            "receipt, match or conclusive zero) still supersedes a human's resolution.")


@router.post("/operation/confirm")
async def operation_confirm(request: Request) -> Response:
    decision = await _operation_decision(request)
    if isinstance(decision, Response):
        return decision
    try:
        _wiring(request).ledger.record_evidence(decision.evidence)
    except ReconcilerError as exc:
        return _render(request, "message.html", 404, title="Not recorded", message=str(exc))
    return RedirectResponse(f"/ui/operation?id={_q(decision.op_id)}&done={decision.action}",
                            status_code=303)


@router.get("/runs")
def runs_page(request: Request, state: str | None = None, after: str | None = None,
              unhealthy: str | None = None) -> Response:
    if access_of(request).session(request) is None:
        return _to_login()
    journal = _journal(request)
    state = state if state in {s.value for s in RunState} else None
    page = journal.list_runs(state=state, unhealthy=_flag(unhealthy), after=after or None,
                             limit=PAGE + 1) if journal else []
    more = len(page) > PAGE
    return _render(request, "runs.html", items=page[:PAGE],
                   next_cursor=page[PAGE - 1].run_id if more else None,
                   states=[s.value for s in RunState],
                   filters={"state": state or "", "unhealthy": unhealthy or ""})


@router.get("/run")
def run_page(request: Request, id: str) -> Response:
    if access_of(request).session(request) is None:
        return _to_login()
    journal = _journal(request)
    try:
        if journal is None:
            raise ReconcilerError("this store keeps no runs")
        view = journal.load(id)
        events = journal.events(id)
    except ReconcilerError as exc:
        return _render(request, "message.html", 404, title="No such run", message=str(exc))
    pending = view.calls.get(view.approval.tool_call_id) if view.approval else None
    return _render(request, "run.html", run=view, events=events, pending=pending,
                   actions={k: v[0] for k, v in RUN_ACTIONS.items()},
                   can_decide=request.app.state.runs is not None)


@router.post("/run/decide")
async def run_decide(request: Request) -> Response:
    checked = await _checked_form(request)
    if isinstance(checked, Response):
        return checked
    _, form = checked
    action = form.get("action", "")
    if action not in RUN_ACTIONS:
        return _render(request, "message.html", 422, title="Unknown decision",
                       message=f"choose one of: {', '.join(RUN_ACTIONS)}")
    label, what = RUN_ACTIONS[action]
    return _render(request, "confirm.html", target="run", id=form.get("id", ""),
                   action=action, label=label, note=form.get("note", ""),
                   resume_token=form.get("resume_token", ""),
                   next=f"If you confirm, {what}.")


@router.post("/run/confirm")
async def run_confirm(request: Request) -> Response:
    checked = await _checked_form(request)
    if isinstance(checked, Response):
        return checked
    operator, form = checked
    run_id, action = form.get("id", ""), form.get("action", "")
    runs = request.app.state.runs
    if runs is None or action not in RUN_ACTIONS:
        return _render(request, "message.html", 409, title="Not recorded",
                       message="decisions on runs need the sidecar that runs the agent "
                       "(start it with --agent)" if runs is None else "unknown decision")
    try:
        runs.runtime.decide(run_id, form.get("resume_token", ""), action, actor=operator,
                            note=form.get("note", ""))
    except ReconcilerError as exc:
        return _render(request, "message.html", 409, title="Not recorded", message=str(exc))
    # Recorded; if another worker holds the run, it carries the decision out (as with
    # POST /v1/runs/{id}/approve).
    with suppress(RunConflictError):
        await runs.runtime.advance(run_id, deadline=time.monotonic() + RUN_DEADLINE_S)
    return RedirectResponse(f"/ui/run?id={_q(run_id)}", status_code=303)


def _q(value: str) -> str:
    return quote(value, safe="")
