"""Who may use the console, and the browser session that remembers it.

`credential_name` is the one place that decides whether a presented credential is an
operator's, and under what name: a credential with the operator or admin role (service.auth),
under its own name (RECONCILER_TOKEN is the one named "admin"); a service without credentials
(loopback only) lets the loopback user in as "operator@loopback".

A login puts the name in a signed session cookie (HttpOnly, SameSite=Strict), with a mark of
the credential it was opened with: a keyed hash of that credential's stored hash and roles,
never the token or its hash (a signed cookie is readable). Every request checks the session
against the credentials the service holds now, so a credential removed, given a new token or
stripped of its operator role ends its sessions at once, whatever the cookie says. A session
ends after IDLE_S without a page and ABSOLUTE_S after its login, whichever comes first; each
page renews the idle clock. Each session carries its own CSRF token, which every form sends
back and every POST checks. The signing key is RECONCILER_CONSOLE_KEY (give replicas behind
one address the same one), else a key made when the process starts: a restart logs everyone
out.

    GET /ui/login ─ form + csrf cookie ─▶ POST /ui/login (credential, csrf) ─▶ session cookie
    GET /ui/* ─ session(request): signed, not idle, not too old, credential unchanged ─▶ page
    POST /ui/* ─ csrf == session's ─▶ decision
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import Response
from itsdangerous import BadSignature, URLSafeSerializer

from reconciler.service.credentials import Credential, Keyring, Role

KEY_ENV = "RECONCILER_CONSOLE_KEY"
SESSION_COOKIE = "reconciler_console"
LOGIN_COOKIE = "reconciler_console_login"
#: A session ends this long after its latest page, or this long after its login.
IDLE_S = 30 * 60
ABSOLUTE_S = 8 * 3600
LOOPBACK_OPERATOR = "operator@loopback"
DECIDING_ROLES = frozenset({Role.OPERATOR, Role.ADMIN})


@dataclass(frozen=True, slots=True)
class Session:
    operator: str
    csrf: str
    #: When its login was, and the mark of the credential it was opened with.
    issued: float
    bound: str


class Access:
    """The console's credential check, session signing and CSRF tokens, one per app."""

    def __init__(self, keyring: Keyring, key: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.keyring = keyring
        self.clock = clock
        self._secret = (key or os.environ.get(KEY_ENV) or secrets.token_urlsafe(32)).encode()
        # Untimed: the session's own `issued` and `seen` carry both lifetimes, on `clock`.
        self._signer = URLSafeSerializer(self._secret.decode(), salt="reconciler-console")

    def _operator(self, name: str) -> Credential | None:
        found = next((c for c in self.keyring.credentials if c.name == name), None)
        return found if found is not None and found.roles & DECIDING_ROLES else None

    def credential_name(self, presented: str) -> str | None:
        """The operator a credential names (its own name), or None when it is no operator's:
        only the operator and admin roles decide (service.auth)."""
        if not self.keyring:
            return LOOPBACK_OPERATOR
        found = self.keyring.find(presented.strip())
        if found is None or not found.roles & DECIDING_ROLES:
            return None
        return found.name

    def _mark(self, operator: str) -> str | None:
        """The mark of the credential `operator` signs in with today, None when there is none
        (removed, or no longer an operator's): it changes with the credential's token and
        roles, and says nothing of either without the console's key."""
        if not self.keyring:
            what = LOOPBACK_OPERATOR if operator == LOOPBACK_OPERATOR else None
        else:
            found = self._operator(operator)
            what = None if found is None else (
                f"{found.name}\0{found.sha256}\0{','.join(sorted(found.roles))}")
        if what is None:
            return None
        return hmac.new(self._secret, what.encode(), hashlib.sha256).hexdigest()[:32]

    @staticmethod
    def new_login_token() -> str:
        """The CSRF token of one login form (double-submitted: a cookie and a field)."""
        return secrets.token_urlsafe(24)

    def needs_credential(self) -> bool:
        return bool(self.keyring)

    def new_session(self, operator: str) -> Session:
        mark = self._mark(operator)
        assert mark is not None, "a session is opened only for a credential just checked"
        return Session(operator, secrets.token_urlsafe(24), self.clock(), mark)

    def keep(self, response: Response, session: Session, *, secure: bool) -> None:
        """Set (or renew: the idle clock starts again) the session's cookie on `response`."""
        now = self.clock()
        value = self._signer.dumps({"operator": session.operator, "csrf": session.csrf,
                                    "issued": session.issued, "seen": now,
                                    "bound": session.bound})
        response.set_cookie(SESSION_COOKIE, value,
                            max_age=max(1, int(session.issued + ABSOLUTE_S - now)),
                            httponly=True, samesite="strict", path="/ui", secure=secure)

    def session(self, request: Request) -> Session | None:
        """The request's live session: signed by this console's key, used within IDLE_S, at
        most ABSOLUTE_S old, and opened with the credential its operator has now."""
        value = request.cookies.get(SESSION_COOKIE)
        if not value:
            return None
        try:
            data = self._signer.loads(value)
        except BadSignature:
            return None
        if not isinstance(data, dict):
            return None
        operator, csrf, bound = data.get("operator"), data.get("csrf"), data.get("bound")
        issued, seen = data.get("issued"), data.get("seen")
        if not (isinstance(operator, str) and isinstance(csrf, str) and isinstance(bound, str)
                and isinstance(issued, int | float) and isinstance(seen, int | float)):
            return None
        now = self.clock()
        if now - seen > IDLE_S or now - issued > ABSOLUTE_S:
            return None
        mark = self._mark(operator)
        if mark is None or not hmac.compare_digest(mark, bound):
            return None
        return Session(operator, csrf, issued, bound)


def access_of(request: Request) -> Access:
    access: Access = request.app.state.console_access
    return access


def csrf_ok(expected: str, presented: object) -> bool:
    """A form's CSRF token against the one its session (or login cookie) holds."""
    return bool(expected) and isinstance(presented, str) and hmac.compare_digest(
        expected.encode(), presented.encode())
