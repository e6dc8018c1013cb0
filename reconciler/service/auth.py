"""Who is calling, and what their role lets them do (SPEC section 6, "Trust").

Authentication is a middleware, so that unknown routes, the OpenAPI document and anything added
later are covered too: nothing is reachable by forgetting a dependency. It finds the credential
the bearer token belongs to and puts it in the request's scope. Authorization is one FastAPI
dependency per permission, declared on each route; a refusal is a 403 problem naming the role
that would do.

    permission   what it covers                                   roles that have it
    read         GET operations and runs, /metrics, /readyz        all
    record       intents, attempts, retry requests, reconcile;     worker, operator, admin
                 creating and advancing runs (create, continue)
    decide       resolutions, approvals; runs: approve, reject,    operator, admin
                 cancel, resume
    evidence     POST .../evidence (provider evidence)             evidence, admin

Without any credential configured the service serves loopback only, and every caller is the
anonymous `Principal` with every permission (the Quickstart). The bearer is not needed on
`/healthz` (liveness reveals nothing) nor on `/v1/webhooks/*`: a provider's callback
authenticates by its signature, which its route checks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from fastapi import Depends, Request
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from reconciler.service.credentials import Keyring, Role
from reconciler.service.problems import (
    UNAUTHORIZED,
    ProblemError,
    ProblemType,
    problem_response,
)
from reconciler.service.webhooks import is_signed_path

#: Orchestrators probe liveness without credentials; it reveals nothing but "the process serves".
OPEN_PATHS = frozenset({"/healthz"})
#: The operator console: a browser sends no Authorization header, so the console checks its
#: own signed session (service.ui.access) instead of the bearer.
CONSOLE_PREFIX = "/ui"
#: Provider callbacks carry a provider signature instead of a bearer token.
SCOPE_KEY = "reconciler.principal"

FORBIDDEN = ProblemType("forbidden", 403, "The credential's role does not allow this")


class Permission(StrEnum):
    READ = "read"
    RECORD = "record"
    DECIDE = "decide"
    EVIDENCE = "evidence"


GRANTS: dict[Role, frozenset[Permission]] = {
    Role.WORKER: frozenset({Permission.READ, Permission.RECORD}),
    Role.OPERATOR: frozenset({Permission.READ, Permission.RECORD, Permission.DECIDE}),
    Role.EVIDENCE: frozenset({Permission.READ, Permission.EVIDENCE}),
    Role.ADMIN: frozenset(Permission),
}
#: The role a 403 names: the narrowest that has the permission.
NEEDED = {Permission.READ: Role.WORKER, Permission.RECORD: Role.WORKER,
          Permission.DECIDE: Role.OPERATOR, Permission.EVIDENCE: Role.EVIDENCE}


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller: a credential's name and roles, or the anonymous loopback caller."""

    name: str
    roles: frozenset[Role]
    #: No credential is configured: loopback mode, where any local process may do anything.
    anonymous: bool = False

    def may(self, permission: Permission) -> bool:
        return any(permission in GRANTS[r] for r in self.roles)

    def actor(self, claimed: str | None) -> str:
        """Who a resolution or approval is recorded as: the credential's name. The body's
        `actor` is accepted for compatibility and ignored, except with no credential at all,
        where there is no name to use but the one given."""
        return (claimed or "anonymous") if self.anonymous else self.name


ANONYMOUS = Principal("anonymous", frozenset({Role.ADMIN}), anonymous=True)


def is_open(path: str) -> bool:
    """Reachable without the bearer token."""
    return (path in OPEN_PATHS or is_signed_path(path) or path == CONSOLE_PREFIX
            or path.startswith(CONSOLE_PREFIX + "/"))


class BearerAuth:
    """Finds the caller's credential; 401 when there is none or it is not known."""

    def __init__(self, app: ASGIApp, keyring: Keyring) -> None:
        self.app = app
        self.keyring = keyring

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self.keyring:
            scope[SCOPE_KEY] = ANONYMOUS
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization", "")
        scheme, _, presented = header.partition(" ")
        found = self.keyring.find(presented.strip()) if scheme.lower() == "bearer" else None
        path: str = scope["path"]
        if found is not None:
            scope[SCOPE_KEY] = Principal(found.name, found.roles)
        if found is not None or is_open(path):
            await self.app(scope, receive, send)
            return
        # RFC 6750: no credentials get a bare challenge, wrong ones say the token is invalid.
        challenge = 'Bearer error="invalid_token"' if header else "Bearer"
        response = problem_response(
            UNAUTHORIZED, "send Authorization: Bearer <token> (a credential the service was "
            "started with)", path, headers={"WWW-Authenticate": challenge})
        await response(scope, receive, send)


def principal(request: Request) -> Principal:
    """The caller, as the middleware found it; a route outside the middleware has none."""
    found: Principal | None = request.scope.get(SCOPE_KEY)
    if found is None:
        raise ProblemError(UNAUTHORIZED, "send Authorization: Bearer <token>")
    return found


def _requiring(permission: Permission) -> Callable[[Request], Awaitable[Principal]]:
    # A coroutine, though it awaits nothing: FastAPI runs a plain `def` dependency on its
    # thread pool (fastapi/dependencies/utils.py, solve_dependencies), one thread hop per
    # request for a check that touches nothing but the request's scope.
    async def require(request: Request) -> Principal:
        caller = principal(request)
        if not caller.may(permission):
            needed = NEEDED[permission]
            roles = ", ".join(sorted(caller.roles))
            raise ProblemError(FORBIDDEN, f"credential {caller.name!r} ({roles}) may not "
                               f"{permission.value} here: this needs role {needed.value} "
                               "(or admin)",
                extensions={"required_role": needed.value, "permission": permission.value})
        return caller

    require.__name__ = f"require_{permission.value}"
    return require


#: One dependency per permission, for routes here and in other service modules:
#: `caller: Operator` as a parameter, or `dependencies=[Depends(require_operator)]`.
require_reader = _requiring(Permission.READ)
require_worker = _requiring(Permission.RECORD)
require_operator = _requiring(Permission.DECIDE)
require_evidence = _requiring(Permission.EVIDENCE)

Reader = Annotated[Principal, Depends(require_reader)]
Worker = Annotated[Principal, Depends(require_worker)]
Operator = Annotated[Principal, Depends(require_operator)]
EvidenceGiver = Annotated[Principal, Depends(require_evidence)]
