"""Credentials, checked as each provider checks them, refused with each provider's own answer.

The sandbox knows no accounts, so it accepts any credential of the provider's form and refuses
a missing or malformed one; `SANDBOX_CREDENTIALS` are well-formed ones for the sandbox's own
callers (tests, examples, the demo), and `SandboxAuth` sends the right one for each root.
A request without any credential is refused too, unless `check_credentials: false`
(`/_sandbox/config`) lets it through; a malformed one is refused either way. Twilio's Basic
check (the user must be the path's Account SID) is in sms.py.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Generator
from urllib.parse import parse_qsl

import httpx
from fastapi import Request

from reconciler.sandbox.shapes import (
    GITHUB_DOCS,
    github_error,
    postmark_error,
    provider_root,
    slack_error,
    stripe_error,
)
from reconciler.sandbox.state import SandboxState

#: Well-formed credentials for the sandbox's own callers, by provider root (none is real).
SANDBOX_CREDENTIALS = {
    "pay": {"Authorization": "Bearer sk_test_sandbox"},
    "chat": {"Authorization": "Bearer xoxb-sandbox"},
    "gh": {"Authorization": "Bearer ghp_sandbox"},
    # Postmark's documented test token (https://postmarkapp.com/developer/api/overview#
    # authentication): accepted by Postmark, it sends nothing.
    "mail": {"X-Postmark-Server-Token": "POSTMARK_API_TEST"},
}
#: The environment the recipes read those credentials from (probes/recipes/*.py `token_env`).
SANDBOX_ENV = {
    "STRIPE_SECRET_KEY": "sk_test_sandbox", "SLACK_BOT_TOKEN": "xoxb-sandbox",
    "GITHUB_TOKEN": "ghp_sandbox", "POSTMARK_SERVER_TOKEN": "POSTMARK_API_TEST",
}

# https://docs.stripe.com/keys: secret `sk_`, restricted `rk_`, then the mode.
_STRIPE_KEY = re.compile(r"(sk|rk)_(test|live)_[0-9A-Za-z]+")
# https://docs.slack.dev/authentication/tokens: bot xoxb-, user xoxp-, app xapp-, ...
_SLACK_TOKEN = re.compile(r"xox[abpre]-[0-9A-Za-z-]+|xapp-[0-9A-Za-z-]+")
# https://github.blog/engineering/platform-security/behind-githubs-new-authentication-token-formats/
_GITHUB_TOKEN = re.compile(r"gh[pousr]_[0-9A-Za-z]+|github_pat_[0-9A-Za-z_]+|[0-9a-f]{40}")
_POSTMARK_TOKEN = re.compile(
    r"POSTMARK_API_TEST|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class SandboxAuth(httpx.Auth):
    """httpx auth sending `SANDBOX_CREDENTIALS` for the provider a request goes to."""

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        for name, value in SANDBOX_CREDENTIALS.get(provider_root(request.url.path), {}).items():
            request.headers.setdefault(name, value)
        yield request


def _bearer(request: Request) -> str | None:
    """The token of `Authorization: Bearer|token <t>`, or the user of `Basic` (how Stripe's
    SDKs once sent the key); None when there is no Authorization header."""
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() == "basic":
        try:
            return base64.b64decode(value, validate=True).decode().partition(":")[0]
        except (binascii.Error, UnicodeDecodeError):
            return ""
    return value.strip() if scheme.lower() in ("bearer", "token") else ""


def _missing_ok(request: Request) -> bool:
    state: SandboxState = request.app.state.sandbox
    return not state.config.check_credentials


def _masked(key: str) -> str:
    # Stripe shows the start of a refused key and its last four characters.
    return key[:8] + "*" * max(len(key) - 12, 0) + key[-4:] if len(key) > 12 else "****"


async def stripe_key(request: Request) -> None:
    # https://docs.stripe.com/api/authentication: 401 with an invalid_request_error.
    if "/_sandbox/" in request.url.path:
        return
    key = _bearer(request)
    if key is None:
        if _missing_ok(request):
            return
        raise stripe_error(401, "You did not provide an API key. You need to provide your API "
                                "key in the Authorization header, using Bearer auth (e.g. "
                                "'Authorization: Bearer YOUR_SECRET_KEY'). See "
                                "https://stripe.com/docs/api#authentication for details, or we "
                                "can help at https://support.stripe.com/.")
    if not _STRIPE_KEY.fullmatch(key):
        raise stripe_error(401, f"Invalid API Key provided: {_masked(key)}")


async def slack_token(request: Request) -> None:
    # https://docs.slack.dev/reference/methods/chat.postMessage#errors: HTTP 200 with
    # `not_authed` (no token) or `invalid_auth` (a token Slack does not know).
    token = _bearer(request)
    if token is None:
        token = request.query_params.get("token")
    if token is None and request.headers.get("content-type", "").startswith(
            "application/x-www-form-urlencoded"):
        token = dict(parse_qsl((await request.body()).decode("utf-8", "replace"))).get("token")
    if token is None:
        if _missing_ok(request):
            return
        raise slack_error("not_authed")
    if not _SLACK_TOKEN.fullmatch(token):
        raise slack_error("invalid_auth")


async def github_token(request: Request) -> None:
    # GitHub reads public repositories without a token and writes with one: a missing token
    # on a write is 401 "Requires authentication", a malformed one 401 "Bad credentials"
    # (https://docs.github.com/rest/authentication/authenticating-to-the-rest-api).
    token = _bearer(request)
    if token is None:
        if request.method in ("GET", "HEAD") or _missing_ok(request):
            return
        raise github_error(401, "Requires authentication", GITHUB_DOCS)
    if not _GITHUB_TOKEN.fullmatch(token):
        raise github_error(401, "Bad credentials", GITHUB_DOCS)


async def postmark_token(request: Request) -> None:
    # https://postmarkapp.com/developer/api/overview#error-codes: 10, "Bad or missing API
    # token", as a 401.
    token = request.headers.get("x-postmark-server-token")
    if token is None:
        if _missing_ok(request):
            return
        raise postmark_error(401, 10, "No Account or Server API tokens were supplied in the "
                                      "HTTP headers. Please add a header for either "
                                      "X-Postmark-Server-Token or X-Postmark-Account-Token.")
    if not _POSTMARK_TOKEN.fullmatch(token):
        raise postmark_error(401, 10, "The Server Token you provided in the "
                                      "X-Postmark-Server-Token request header was invalid. "
                                      "Please verify that you are using a valid token.")

