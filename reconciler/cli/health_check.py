"""`reconciler health`: the container's health check. It asks the sidecar's `/readyz` with the
bearer token the sidecar itself was given, so that it works when `RECONCILER_TOKEN` is set (an
unauthenticated `/readyz` gets 401, and the container would never come up healthy).

    reconciler health   ── GET http://127.0.0.1:$RECONCILER_PORT/readyz ──▶ 200: exit 0
                           Authorization: Bearer $RECONCILER_TOKEN          else: exit 1, why

Only the token's variable is read, never a flag (it would show in `ps`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

# Not imported from service.settings: importing the service package builds the whole app, and
# a health check runs every few seconds under a timeout.
TOKEN_ENV = "RECONCILER_TOKEN"
DEFAULT_PORT = 8765


@dataclass(frozen=True, slots=True)
class Health:
    ready: bool
    #: What to print: "ready", or why not.
    says: str


def readyz_url(env: Mapping[str, str]) -> str:
    """The sidecar in this container: loopback, on the port it serves (RECONCILER_PORT)."""
    return f"http://127.0.0.1:{env.get('RECONCILER_PORT') or DEFAULT_PORT}/readyz"


def check_health(url: str, *, token_env: str = TOKEN_ENV, timeout_s: float = 5.0,
                 env: Mapping[str, str] | None = None) -> Health:
    """GET `url` with the bearer token in `token_env` (none when unset: a loopback sidecar
    without credentials)."""
    env = os.environ if env is None else env
    token = env.get(token_env)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.get(url, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return Health(False, f"not ready: {url} did not answer ({type(exc).__name__})")
    if response.status_code == 200:
        return Health(True, "ready")
    try:
        detail = response.json().get("detail") or response.reason_phrase
    except ValueError:
        detail = response.reason_phrase
    hint = (f" (is {token_env} the sidecar's token?)" if response.status_code == 401 else "")
    return Health(False, f"not ready: {response.status_code} {detail}{hint}")
