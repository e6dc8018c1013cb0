"""Who may use the console, and the browser session that remembers it.

`credential_name` is the one place that decides whether a presented credential is an
operator's, and under what name: a credential with the operator or admin role (service.auth),
under its own name (RECONCILER_TOKEN is the one named "admin"); a service without credentials
(loopback only) lets the loopback user in as "operator@loopback".

A login puts the name in a signed session cookie (HttpOnly, SameSite=Strict, 8 hours); each
session carries its own CSRF token, which every form sends back and every POST checks. The
signing key is RECONCILER_CONSOLE_KEY (give replicas behind one address the same one), else a
key made when the process starts: a restart logs everyone out.

    GET /ui/login ─ form + csrf cookie ─▶ POST /ui/login (credential, csrf) ─▶ session cookie
    GET /ui/* ─ operator_name(session) ─▶ page      POST /ui/* ─ csrf == session's ─▶ decision
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass

from fastapi import Request
from itsdangerous import BadSignature, URLSafeTimedSerializer

from reconciler.service.credentials import Keyring, Role

KEY_ENV = "RECONCILER_CONSOLE_KEY"
SESSION_COOKIE = "reconciler_console"
LOGIN_COOKIE = "reconciler_console_login"
SESSION_S = 8 * 3600
LOOPBACK_OPERATOR = "operator@loopback"


@dataclass(frozen=True, slots=True)
class Session:
    operator: str
    csrf: str


class Access:
    """The console's credential check, session signing and CSRF tokens, one per app."""

    def __init__(self, keyring: Keyring, key: str | None = None) -> None:
        self.keyring = keyring
        secret = key or os.environ.get(KEY_ENV) or secrets.token_urlsafe(32)
        self._signer = URLSafeTimedSerializer(secret, salt="reconciler-console")

    def credential_name(self, presented: str) -> str | None:
        """The operator a credential names (its own name), or None when it is no operator's:
        only the operator and admin roles decide (service.auth)."""
        if not self.keyring:
            return LOOPBACK_OPERATOR
        found = self.keyring.find(presented.strip())
        if found is None or not found.roles & {Role.OPERATOR, Role.ADMIN}:
            return None
        return found.name

    @staticmethod
    def new_login_token() -> str:
        """The CSRF token of one login form (double-submitted: a cookie and a field)."""
        return secrets.token_urlsafe(24)

    def needs_credential(self) -> bool:
        return bool(self.keyring)

    def session_cookie(self, operator: str) -> str:
        return self._signer.dumps({"operator": operator, "csrf": secrets.token_urlsafe(24)})

    def session(self, request: Request) -> Session | None:
        value = request.cookies.get(SESSION_COOKIE)
        if not value:
            return None
        try:
            data = self._signer.loads(value, max_age=SESSION_S)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("operator"), str):
            return None
        return Session(data["operator"], str(data.get("csrf", "")))


def access_of(request: Request) -> Access:
    access: Access = request.app.state.console_access
    return access


def operator_name(request: Request) -> str | None:
    """The operator signed in to this request's session, or None: the console's one check."""
    session = access_of(request).session(request)
    return session.operator if session else None


def csrf_ok(expected: str, presented: object) -> bool:
    """A form's CSRF token against the one its session (or login cookie) holds."""
    return bool(expected) and isinstance(presented, str) and hmac.compare_digest(
        expected.encode(), presented.encode())
