"""The console holds every form and query parameter to the API's limits, on SQLite and on
PostgreSQL alike: a note past 2,000 characters, a NUL byte in a note, an id, a provider, a
cursor or a state answers 422 with the console's page naming the field, never a 500, and
nothing is stored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reconciler.core.domain import Resolution
from reconciler.core.runs.events import EventKind
from reconciler.store.journal import SqlJournal

from console_harness import Console, console_sidecar, signed_in
from databases import pg_unreachable
from service_harness import database

pytestmark = pytest.mark.usefixtures("no_internal_errors")

LONG = "x" * 60_000
NUL = "seen\x00in the dashboard"


@pytest.fixture(params=["sqlite", "postgresql"])
def console(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Console]:
    if request.param == "postgresql" and (reason := pg_unreachable()):
        pytest.skip(reason)
    with database(request.param, tmp_path) as url, console_sidecar(tmp_path, db=url) as running:
        yield running


@pytest.fixture
def session(console: Console) -> Iterator[tuple[httpx.Client, str]]:
    with signed_in(console.url) as signed:
        yield signed


def refused(answer: httpx.Response, field: str) -> None:
    assert answer.status_code == 422, (answer.status_code, answer.text[:300])
    assert "Not accepted" in answer.text and field in answer.text
    assert "\x00" not in answer.text and LONG not in answer.text


@pytest.mark.parametrize("note", [LONG, NUL], ids=["long", "nul"])
@pytest.mark.parametrize("step", ["decide", "confirm"])
def test_an_operation_note_past_the_apis_limits_is_refused_and_not_stored(
        console: Console, session: tuple[httpx.Client, str], note: str, step: str) -> None:
    http, csrf = session
    refused(http.post(f"/ui/operation/{step}", data={
        "csrf": csrf, "id": "late", "action": "resolve_applied", "note": note}), "note")
    assert not console.store.facts("late").of(Resolution)


@pytest.mark.parametrize("note", [LONG, NUL], ids=["long", "nul"])
@pytest.mark.parametrize("step", ["decide", "confirm"])
def test_a_run_note_past_the_apis_limits_is_refused_and_not_stored(
        console: Console, session: tuple[httpx.Client, str], note: str, step: str) -> None:
    http, csrf = session
    token = SqlJournal(console.store).load("r1").approval
    assert token is not None
    refused(http.post(f"/ui/run/{step}", data={
        "csrf": csrf, "id": "r1", "action": "reject", "resume_token": token.resume_token,
        "note": note}), "note")
    assert not [e for e in SqlJournal(console.store).events("r1")
                if e.kind is EventKind.APPROVAL_DECIDED]


def test_a_note_of_2000_characters_is_recorded(
        console: Console, session: tuple[httpx.Client, str]) -> None:
    http, csrf = session
    answer = http.post("/ui/operation/confirm", data={
        "csrf": csrf, "id": "late", "action": "resolve_applied", "note": "n" * 2000})
    assert answer.status_code == 303
    [resolution] = console.store.facts("late").of(Resolution)
    assert len(resolution.note) == 2000


@pytest.mark.parametrize(("page", "field"), [
    ("/ui/operations?provider=sl%00ow", "provider"),
    ("/ui/operations?provider=" + "p" * 101, "provider"),
    ("/ui/operations?after=la%00te", "after"),
    ("/ui/operations?verdict=not-a-verdict", "verdict"),
    ("/ui/operation?id=la%00te", "id"),
    ("/ui/operation?id=" + "o" * 201, "id"),
    ("/ui/runs?state=awaiting%00approval", "state"),
    ("/ui/runs?after=r%001", "after"),
    ("/ui/run?id=r%001", "id"),
], ids=["provider-nul", "provider-long", "operations-after-nul", "verdict", "operation-id-nul",
        "operation-id-long", "state-nul", "runs-after-nul", "run-id-nul"])
def test_a_query_parameter_past_the_apis_limits_is_refused(
        session: tuple[httpx.Client, str], page: str, field: str) -> None:
    http, _ = session
    refused(http.get(page), field)


def test_an_id_with_a_nul_byte_in_a_form_is_refused(
        console: Console, session: tuple[httpx.Client, str]) -> None:
    http, csrf = session
    refused(http.post("/ui/operation/confirm", data={
        "csrf": csrf, "id": "la\x00te", "action": "resolve_applied", "note": ""}), "id")
    assert not console.store.facts("late").of(Resolution)
