"""A console session is bound to the credential it was opened with, checked on every request:
after a restart with the same console key, a removed credential, a changed token or a lost
operator role ends it at once (no page, nothing recorded in the operator's name). A session
also ends when idle too long, and when too old however busy."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from fastapi import Request
from fastapi.responses import Response
from itsdangerous import URLSafeSerializer

from reconciler.core.domain import Resolution
from reconciler.ledger import Ledger
from reconciler.service import Settings, create_app
from reconciler.service.credentials import Credential, Keyring, credential
from reconciler.service.ui.access import ABSOLUTE_S, IDLE_S, KEY_ENV, SESSION_COOKIE, Access
from reconciler.store.sql import SqlStore
from reconciler.testing import ManualClock
from reconciler.testing.patience import PATIENCE_S

from builders import OP, intent
from console_harness import csrf_of
from service_harness import serving

ALICE, ALICE_AGAIN = "alice-token-" + "a" * 32, "alice-token-" + "b" * 32
BOB = "bob-token-" + "c" * 32


def alice(token: str = ALICE, role: str = "operator") -> Credential:
    return credential("alice", [role], token, "test")


BOB_CRED = credential("bob", ["operator"], BOB, "test")


#: The sidecar restarts on one SQLite file, as a deployment's does.
pytestmark = pytest.mark.store_kinds("sqlite")


@pytest.fixture
def pending(store: SqlStore, monkeypatch: pytest.MonkeyPatch) -> SqlStore:
    """`store`, holding one operation for the queue, for every start of the sidecar, and one
    console key (a restart keeps the sessions' signatures valid: only the credential check can
    end them)."""
    monkeypatch.setenv(KEY_ENV, "the-same-console-key-" + "k" * 20)
    store.record_intent(intent())
    return store


@contextmanager
def sidecar(store: SqlStore, *credentials: Credential) -> Iterator[str]:
    app = create_app(Settings(sweep_interval_s=0, credentials=credentials),
                     ledger=Ledger(store))
    with serving(app) as url:
        yield url


def session_of(url: str, token: str) -> tuple[str, str]:
    """Sign in with `token`: the session cookie and its CSRF token."""
    with httpx.Client(base_url=url, timeout=PATIENCE_S) as http:
        answer = http.post("/ui/login", data={"csrf": csrf_of(http.get("/ui/login")),
                                              "credential": token})
        assert answer.status_code == 303, answer.text
        return http.cookies[SESSION_COOKIE], csrf_of(http.get(f"/ui/operation?id={OP}"))


def after_restart(url: str, cookie: str, csrf: str) -> tuple[int, int]:
    """What the old session gets from the restarted sidecar: the queue page's status, and the
    status of a confirmed resolution in the session's name."""
    with httpx.Client(base_url=url, timeout=PATIENCE_S, cookies={SESSION_COOKIE: cookie}) as http:
        queue = http.get("/ui/queue").status_code
        decided = http.post("/ui/operation/confirm", data={
            "csrf": csrf, "id": OP, "action": "resolve_applied", "note": "in alice's name"})
        return queue, decided.status_code


def test_a_session_survives_a_restart_with_the_same_credential(pending: SqlStore) -> None:
    with sidecar(pending, alice(), BOB_CRED) as url:
        cookie, csrf = session_of(url, ALICE)
    with sidecar(pending, alice(), BOB_CRED) as url:
        assert after_restart(url, cookie, csrf) == (200, 303)
    [resolution] = pending.facts(OP).of(Resolution)
    assert resolution.actor == "alice"


@pytest.mark.parametrize("now", [
    pytest.param((BOB_CRED,), id="removed"),
    pytest.param((alice(ALICE_AGAIN), BOB_CRED), id="token_changed"),
    pytest.param((alice(role="worker"), BOB_CRED), id="no_longer_an_operator"),
])
def test_a_session_ends_when_its_credential_is_removed_or_changed(
        pending: SqlStore, now: tuple[Credential, ...]) -> None:
    with sidecar(pending, alice(), BOB_CRED) as url:
        cookie, csrf = session_of(url, ALICE)
    with sidecar(pending, *now) as url:
        assert after_restart(url, cookie, csrf) == (303, 403)
    assert not pending.facts(OP).of(Resolution)


def request_with(cookie: str) -> Request:
    return Request({"type": "http", "method": "GET", "path": "/ui/queue", "headers": [
        (b"cookie", f"{SESSION_COOKIE}={cookie}".encode())]})


def cookie_of(response: Response) -> str:
    found = re.search(f"{SESSION_COOKIE}=([^;]+)", response.headers["set-cookie"])
    assert found
    return found.group(1)


def opened(clock: ManualClock) -> tuple[Access, str]:
    access = Access(Keyring([alice()]), key="k" * 32, clock=clock.now)
    response = Response()
    access.keep(response, access.new_session("alice"), secure=False)
    return access, cookie_of(response)


def test_a_session_ends_when_idle_too_long() -> None:
    clock = ManualClock()
    access, cookie = opened(clock)
    clock.advance(IDLE_S - 1)
    assert access.session(request_with(cookie)) is not None
    clock.advance(2)
    assert access.session(request_with(cookie)) is None


def test_each_page_restarts_the_idle_clock_until_the_absolute_lifetime() -> None:
    clock = ManualClock()
    access, cookie = opened(clock)
    started = clock.now()
    for _ in range(ABSOLUTE_S // (IDLE_S - 1) + 2):
        clock.advance(IDLE_S - 1)
        session = access.session(request_with(cookie))
        if session is None:
            break
        response = Response()
        access.keep(response, session, secure=False)
        cookie = cookie_of(response)
    assert ABSOLUTE_S < clock.now() - started <= ABSOLUTE_S + IDLE_S


def test_a_session_cookie_holds_neither_the_token_nor_its_hash() -> None:
    _, cookie = opened(ManualClock())
    payload = URLSafeSerializer("k" * 32, salt="reconciler-console").loads(cookie)
    assert set(payload) == {"operator", "csrf", "issued", "seen", "bound"}
    text = json.dumps(payload)
    assert ALICE not in text and alice().sha256 not in text and payload["operator"] == "alice"
