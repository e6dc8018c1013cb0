"""What every console page and form shares: the router, the templates, the session check
that renews the session's idle clock on each page, the CSRF check of every POST, and the
API's input limits on every form and query parameter (service.ui.inputs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel

from reconciler.core.ports import Journal
from reconciler.service.ui.access import Session, access_of, csrf_ok
from reconciler.service.ui.inputs import refused
from reconciler.service.ui.queue import age
from reconciler.service.wiring import Wiring
from reconciler.store.kinds import journal_of

templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
#: Rows on one page of a list.
PAGE = 50
M = TypeVar("M", bound=BaseModel)


def console_router() -> APIRouter:
    """A router for some of the console's pages (under /ui, not in the API's schema)."""
    return APIRouter(prefix="/ui", include_in_schema=False)


def wiring_of(request: Request) -> Wiring:
    wiring: Wiring = request.app.state.wiring
    return wiring


def journal_here(request: Request) -> Journal:
    """The runs beside the served store (every store kind keeps them: store.kinds)."""
    return journal_of(wiring_of(request).store)


def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A page; a signed-in operator's session is renewed with it (its idle clock restarts)."""
    access = access_of(request)
    session = access.session(request)
    page = templates.TemplateResponse(request, name, {
        "operator": session.operator if session else None,
        "csrf": session.csrf if session else "", "now": wiring_of(request).ledger.clock(),
        "age": age, **context}, status_code=status)
    if session is not None:
        access.keep(page, session, secure=request.url.scheme == "https")
    return page


def message(request: Request, status: int, title: str, text: str) -> HTMLResponse:
    return render(request, "message.html", status, title=title, message=text)


def to_login() -> RedirectResponse:
    return RedirectResponse("/ui/login", status_code=303)


def signed_in(request: Request) -> Session | None:
    return access_of(request).session(request)


def query(request: Request, model: type[M]) -> M | Response:
    """A page's query parameters as `model` (an empty field is left out: "any"), or the answer
    that refuses the page: to the login page without a session, 422 for a parameter past the
    API's limits (nothing read or stored)."""
    if signed_in(request) is None:
        return to_login()
    params = {k: v for k, v in request.query_params.items() if v != ""}
    return checked(request, model, params)


def checked(request: Request, model: type[M], data: dict[str, str]) -> M | Response:
    """`data` as `model`, or the page saying which field broke which limit."""
    answer = refused(model, data)
    if isinstance(answer, str):
        return message(request, 422, "Not accepted", answer)
    return answer


async def form_of(request: Request) -> dict[str, str]:
    form = await request.form()
    return {k: v for k, v in form.items() if isinstance(v, str)}


async def checked_form(request: Request,
                       model: type[M]) -> tuple[str, M] | Response:
    """The operator and the form of a POST as `model`, or the answer that refuses it: no
    session (403), a missing or wrong CSRF token (403), a field past the API's limits (422)."""
    session = signed_in(request)
    if session is None:
        return message(request, 403, "Not signed in", "Sign in as an operator first.")
    form = await form_of(request)
    if not csrf_ok(session.csrf, form.pop("csrf", None)):
        return message(request, 403, "Refused", "The form's CSRF token is missing or wrong: "
                       "nothing was recorded. Open the page again and resend the form.")
    fields = checked(request, model, form)
    return fields if isinstance(fields, Response) else (session.operator, fields)


def q(value: str) -> str:
    return quote(value, safe="")
