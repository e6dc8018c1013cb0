"""The console's forms and query parameters, fuzzed (hypothesis) on SQLite and PostgreSQL: any
text or bytes in any field, known ids and decisions among them so that requests get past the
404s into the decisions, answers below 500 and no internal error logged. The console is not in
the OpenAPI document schemathesis reads (it serves HTML forms), so its fields are listed here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.testing.patience import PATIENCE_S

from console_harness import Console, console_sidecar, login_form, signed_in
from databases import pg_unreachable
from service_harness import database
from sidecar_client import TOKEN

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_internal_errors")]

#: Values that exist in the console's store (so a request can reach a decision).
KNOWN = ["late", "r1", "r2", "dup", "resolve_applied", "resolve_not_applied", "approve_retry",
         "compensate", "approve", "reject", "applied", "not_applied", "true", "false",
         "indeterminate", "awaiting_approval", ""]
#: Any text or bytes (invalid UTF-8, NUL, past every limit) or a known value.
VALUE = st.one_of(st.sampled_from(KNOWN), st.text(max_size=2100),
                  st.binary(max_size=300), st.just("n" * 2001), st.just("a\x00b"))
PAGES = {
    "/ui": ["x"],
    "/ui/login": ["x"],
    "/ui/operations": ["verdict", "provider", "escalated", "after", "limit"],
    "/ui/operation": ["id", "done"],
    "/ui/runs": ["state", "unhealthy", "after", "correlation_id"],
    "/ui/run": ["id"],
    "/ui/queue": ["x"],
}
FORMS = {
    "/ui/operation/decide": ["id", "action", "note", "reference"],
    "/ui/operation/confirm": ["id", "action", "note", "reference"],
    "/ui/run/decide": ["id", "action", "note", "resume_token"],
    "/ui/run/confirm": ["id", "action", "note", "resume_token"],
}
FUZZ = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def console(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    if request.param == "postgresql" and (reason := pg_unreachable()):
        pytest.skip(reason)
    tmp_path = Path(tmp_path_factory.mktemp("fuzz"))
    with database(request.param, tmp_path) as url, console_sidecar(
            tmp_path, first_sends=("r2",), duplicates=("dup",), db=url) as running:
        yield running


@pytest.fixture(scope="module")
def session(console: Console) -> Iterator[tuple[httpx.Client, str]]:
    with signed_in(console.url) as signed:
        yield signed


FORM = {"content-type": "application/x-www-form-urlencoded"}


def encoded(fields: dict[str, str | bytes]) -> bytes:
    return urlencode(fields).encode()


@pytest.mark.parametrize("page", PAGES)
def test_no_query_makes_a_console_page_fail(session: tuple[httpx.Client, str],
                                            page: str) -> None:
    http, _ = session

    @FUZZ
    @given(st.dictionaries(st.sampled_from(PAGES[page]), VALUE, max_size=4))
    def asks(params: dict[str, str | bytes]) -> None:
        answer = http.get(f"{page}?{urlencode(params)}")
        assert answer.status_code in (200, 303, 404, 422), (params, answer.status_code)

    asks()


@pytest.mark.parametrize("form", FORMS)
def test_no_form_makes_a_console_decision_fail(session: tuple[httpx.Client, str],
                                               form: str) -> None:
    http, csrf = session

    @FUZZ
    @given(st.dictionaries(st.sampled_from(FORMS[form]), VALUE, max_size=4))
    def sends(fields: dict[str, str | bytes]) -> None:
        answer = http.post(form, content=encoded({**fields, "csrf": csrf}), headers=FORM)
        assert answer.status_code in (200, 303, 404, 409, 422), (fields, answer.status_code)

    sends()


def test_no_login_form_makes_the_console_fail(console: Console) -> None:
    """Signing in: each try on a fresh login form, the operator's credential and the form's
    CSRF token among the values (so that some get in)."""
    with httpx.Client(base_url=console.url, timeout=PATIENCE_S) as http:

        @FUZZ
        @given(st.dictionaries(st.sampled_from(["csrf", "credential"]),
                               st.one_of(VALUE, st.just(TOKEN), st.none()), max_size=2))
        def signs_in(fields: dict[str, str | bytes | None]) -> None:
            csrf = login_form(http)
            sent = {k: csrf if v is None else v for k, v in fields.items()}
            answer = http.post("/ui/login", content=encoded(sent), headers=FORM)
            assert answer.status_code in (303, 401, 403, 422), (sent, answer.status_code)

        signs_in()


def test_no_logout_form_makes_the_console_fail(console: Console) -> None:
    """On a session of its own: a logout that works ends it (the module's session goes on)."""
    with signed_in(console.url) as (http, csrf):

        @FUZZ
        @given(st.dictionaries(st.sampled_from(["csrf", "x"]),
                               st.one_of(VALUE, st.just(csrf)), max_size=2))
        def signs_out(fields: dict[str, str | bytes]) -> None:
            answer = http.post("/ui/logout", content=encoded(fields), headers=FORM)
            assert answer.status_code in (303, 403, 422), (fields, answer.status_code)

        signs_out()
