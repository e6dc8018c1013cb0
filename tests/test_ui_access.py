"""The console lets operators in and no one else, and refuses a form without its CSRF token
(over plain HTTP: what a browser would send)."""

from __future__ import annotations

from pathlib import Path

import httpx

from reconciler.core.domain import Resolution

from console_harness import console_sidecar, login_form, signed_in
from sidecar_client import TOKEN


def test_without_a_session_every_page_sends_you_to_sign_in(tmp_path: Path) -> None:
    with console_sidecar(tmp_path) as console, httpx.Client(base_url=console.url) as http:
        for page in ("/ui/queue", "/ui/operations", "/ui/operation?id=late", "/ui/runs",
                     "/ui/run?id=r1"):
            answer = http.get(page)
            assert (answer.status_code, answer.headers["location"]) == (303, "/ui/login")


def test_a_credential_that_is_not_an_operators_is_refused(tmp_path: Path) -> None:
    with console_sidecar(tmp_path) as console, httpx.Client(base_url=console.url) as http:
        answer = http.post("/ui/login", data={"csrf": login_form(http),
                                              "credential": "a-worker-token"})
        assert answer.status_code == 401 and "not an operator credential" in answer.text
        assert "set-cookie" not in answer.headers or "reconciler_console=" not in \
            answer.headers["set-cookie"]
        assert http.get("/ui/queue").status_code == 303


def test_a_forged_session_cookie_is_no_session(tmp_path: Path) -> None:
    with console_sidecar(tmp_path) as console, httpx.Client(base_url=console.url) as http:
        http.cookies.set("reconciler_console", '{"operator": "mallory"}')
        assert http.get("/ui/queue").status_code == 303


def test_a_login_without_its_csrf_token_is_refused(tmp_path: Path) -> None:
    with console_sidecar(tmp_path) as console, httpx.Client(base_url=console.url) as http:
        login_form(http)
        assert http.post("/ui/login", data={"credential": TOKEN}).status_code == 403


def test_a_decision_without_the_csrf_token_is_refused_and_records_nothing(
        tmp_path: Path) -> None:
    with console_sidecar(tmp_path) as console:
        with signed_in(console.url) as (http, csrf):
            form = {"id": "late", "action": "resolve_applied", "note": "forged"}
            assert http.post("/ui/operation/confirm", data=form).status_code == 403
            assert http.post("/ui/operation/confirm",
                             data={**form, "csrf": csrf[::-1]}).status_code == 403
            assert not console.store.facts("late").of(Resolution)
            assert http.post("/ui/operation/confirm",
                             data={**form, "csrf": csrf}).status_code == 303
        [resolution] = console.store.facts("late").of(Resolution)
        assert (resolution.actor, resolution.note) == ("admin", "forged")


def test_the_api_still_needs_the_bearer_token(tmp_path: Path) -> None:
    with console_sidecar(tmp_path) as console:
        assert httpx.get(console.url + "/v1/operations").status_code == 401
        with signed_in(console.url) as (http, _):  # a session opens the console, not the API
            assert http.get("/v1/operations").status_code == 401
