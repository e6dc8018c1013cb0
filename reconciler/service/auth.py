"""Bearer-token authentication for every route but the liveness probe and the provider
webhooks (which check the provider's signature instead).

A middleware rather than a route dependency, so that unknown routes, the OpenAPI document and
anything added later are covered too: nothing is reachable by forgetting a dependency.
"""

from __future__ import annotations

import hmac

from pydantic import SecretStr
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from reconciler.service.problems import UNAUTHORIZED, problem_response
from reconciler.service.webhooks import is_signed_path

#: Orchestrators probe liveness without credentials; it reveals nothing but "the process serves".
OPEN_PATHS = frozenset({"/healthz"})


def is_open(path: str) -> bool:
    """Reachable without the bearer token."""
    return path in OPEN_PATHS or is_signed_path(path)


class BearerAuth:
    def __init__(self, app: ASGIApp, token: SecretStr) -> None:
        self.app = app
        self.expected = token.get_secret_value().encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_open(scope["path"]):
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization", "")
        scheme, _, presented = header.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(),
                                                              self.expected):
            await self.app(scope, receive, send)
            return
        # RFC 6750: no credentials get a bare challenge, wrong ones say the token is invalid.
        challenge = 'Bearer error="invalid_token"' if header else "Bearer"
        response = problem_response(
            UNAUTHORIZED, "send Authorization: Bearer <token> (the token the service was "
            "started with)", scope["path"], headers={"WWW-Authenticate": challenge})
        await response(scope, receive, send)
