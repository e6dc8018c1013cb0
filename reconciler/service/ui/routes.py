"""The console's pages and forms. Every page needs an operator's session (else: to the login
page); every POST needs the session's CSRF token (else: 403, nothing recorded). A decision is
two steps: the form says what to do, a confirmation page says what will happen next, and only
the confirmed form records it, with the operator's name from the session, never from a field.

Operation and run ids go in the query (`?id=`), not the path: operation ids may hold `/`.
Here: signing in and out, the queue and the two lists; an operation's page and decisions are
service.ui.operation's, a run's service.ui.run's.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from reconciler.core.domain import Verdict
from reconciler.core.runs.states import RunState
from reconciler.core.schemas import OperationQueryIn
from reconciler.service.credentials import Keyring
from reconciler.service.runs.listing import RunQueryIn
from reconciler.service.ui import operation, run
from reconciler.service.ui.access import LOGIN_COOKIE, SESSION_COOKIE, Access, access_of, csrf_ok
from reconciler.service.ui.inputs import _Fields
from reconciler.service.ui.pages import (
    PAGE,
    checked_form,
    console_router,
    form_of,
    journal_here,
    message,
    query,
    render,
    wiring_of,
)
from reconciler.service.ui.queue import needs_a_human

router = console_router()


def install_console(app: FastAPI, keyring: Keyring) -> None:
    app.state.console_access = Access(keyring)
    for pages in (router, operation.router, run.router):
        app.include_router(pages)


# -- signing in -------------------------------------------------------------------------------


@router.get("")
def home() -> RedirectResponse:
    return RedirectResponse("/ui/queue", status_code=303)


@router.get("/login")
def login_page(request: Request) -> HTMLResponse:
    token = Access.new_login_token()
    page = render(request, "login.html", login_csrf=token,
                  needs_credential=access_of(request).needs_credential())
    page.set_cookie(LOGIN_COOKIE, token, max_age=600, httponly=True, samesite="strict",
                    path="/ui")
    return page


@router.post("/login")
async def login(request: Request) -> Response:
    form = await form_of(request)
    if not csrf_ok(request.cookies.get(LOGIN_COOKIE, ""), form.get("csrf")):
        return message(request, 403, "Refused", "The login form expired or lacks its CSRF "
                       "token: open the login page again.")
    access = access_of(request)
    name = access.credential_name(form.get("credential", ""))
    if name is None:
        token = Access.new_login_token()
        page = render(request, "login.html", 401, login_csrf=token, needs_credential=True,
                      error="That is not an operator credential.")
        page.set_cookie(LOGIN_COOKIE, token, max_age=600, httponly=True, samesite="strict",
                        path="/ui")
        return page
    answer = RedirectResponse("/ui/queue", status_code=303)
    access.keep(answer, access.new_session(name), secure=request.url.scheme == "https")
    answer.delete_cookie(LOGIN_COOKIE, path="/ui")
    return answer


@router.post("/logout")
async def logout(request: Request) -> Response:
    checked = await checked_form(request, _Fields)
    if isinstance(checked, Response):
        return checked
    answer = RedirectResponse("/ui/login", status_code=303)
    answer.delete_cookie(SESSION_COOKIE, path="/ui")
    return answer


# -- the queue and the lists ------------------------------------------------------------------


@router.get("/queue")
def queue_page(request: Request) -> Response:
    refused = query(request, _Fields)
    if isinstance(refused, Response):
        return refused
    items = needs_a_human(wiring_of(request).store, journal_here(request))
    return render(request, "queue.html", items=items)


@router.get("/operations")
def operations_page(request: Request) -> Response:
    filters = query(request, OperationQueryIn)
    if isinstance(filters, Response):
        return filters
    page = wiring_of(request).store.list_operations(
        verdict=filters.verdict.value if filters.verdict else None, provider=filters.provider,
        escalated=filters.escalated, after=filters.after, limit=PAGE + 1)
    more = len(page) > PAGE
    return render(request, "operations.html", items=page[:PAGE],
                  next_cursor=page[PAGE - 1].operation_id if more else None,
                  verdicts=[v.value for v in Verdict],
                  filters={"verdict": filters.verdict.value if filters.verdict else "",
                           "provider": filters.provider or "",
                           "escalated": _flag(filters.escalated)})


@router.get("/runs")
def runs_page(request: Request) -> Response:
    filters = query(request, RunQueryIn)
    if isinstance(filters, Response):
        return filters
    journal = journal_here(request)
    page = journal.list_runs(
        state=filters.state.value if filters.state else None, unhealthy=filters.unhealthy,
        after=filters.after, limit=PAGE + 1)
    more = len(page) > PAGE
    return render(request, "runs.html", items=page[:PAGE],
                  next_cursor=page[PAGE - 1].run_id if more else None,
                  states=[s.value for s in RunState],
                  filters={"state": filters.state.value if filters.state else "",
                           "unhealthy": _flag(filters.unhealthy)})


def _flag(value: bool | None) -> str:
    """A yes/no filter as its select's value ("" for either)."""
    return "" if value is None else str(value).lower()
