"""Errors as RFC 9457 problem details: one stable `type` URI per kind of problem.

Clients branch on `type` (never on `detail`, which is prose). A problem never echoes request
input: validation problems list field locations and messages only, and an unexpected error is
answered with a correlation id while its traceback goes to the log.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InternalError
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reconciler.core.errors import (
    FactTimeError,
    IntentConflictError,
    ReconcilerError,
    StoreUnavailableError,
    UnknownOperationError,
)
from reconciler.core.schemas import Problem

log = logging.getLogger(__name__)

PROBLEM_BASE = "https://reconciler.dev/problems/"
PROBLEM_JSON = "application/problem+json"


@dataclass(frozen=True, slots=True)
class ProblemType:
    slug: str
    status: int
    title: str

    @property
    def type(self) -> str:
        return PROBLEM_BASE + self.slug


BAD_REQUEST = ProblemType("bad-request", 400, "Bad request")
MALFORMED_JSON = ProblemType("malformed-json", 400, "Malformed JSON body")
UNAUTHORIZED = ProblemType("unauthorized", 401, "Missing or wrong bearer token")
UNKNOWN_OPERATION = ProblemType("unknown-operation", 404, "Unknown operation")
NOT_FOUND = ProblemType("not-found", 404, "No such resource")
METHOD_NOT_ALLOWED = ProblemType("method-not-allowed", 405, "Method not allowed")
INTENT_CONFLICT = ProblemType("intent-conflict", 409, "Operation id already recorded with another "
                                               "hash or key")
RETRY_IN_PROGRESS = ProblemType("retry-in-progress", 409, "Another caller holds the retry lease")
#: Opening attempt n>=2 without the live grant for it: the caller must not send (SPEC rule 6).
RETRY_NOT_GRANTED = ProblemType("retry-not-granted", 409, "No retry grant for this attempt: "
                                                      "do not send")
RECONCILE_IN_PROGRESS = ProblemType("reconcile-in-progress", 409, "Another sweeper is probing this "
                                                           "operation")
PAYLOAD_TOO_LARGE = ProblemType("payload-too-large", 413, "Request body too large")
UNSUPPORTED_MEDIA_TYPE = ProblemType("unsupported-media-type", 415, "Request body must be JSON")
VALIDATION = ProblemType("validation", 422, "Request failed validation")
RETRY_MISMATCH = ProblemType("retry-mismatch", 422, "Retry key or hash differs from the intent")
INTERNAL = ProblemType("internal", 500, "Internal error")
STORE_UNAVAILABLE = ProblemType("store-unavailable", 503, "Receipt store unavailable")

_BY_STATUS = {k.status: k for k in (BAD_REQUEST, UNAUTHORIZED, NOT_FOUND, METHOD_NOT_ALLOWED,
                                     PAYLOAD_TOO_LARGE, UNSUPPORTED_MEDIA_TYPE, VALIDATION)}
_BY_ERROR: dict[type[ReconcilerError], ProblemType] = {
    UnknownOperationError: UNKNOWN_OPERATION,
    IntentConflictError: INTENT_CONFLICT,
    StoreUnavailableError: STORE_UNAVAILABLE,
    FactTimeError: VALIDATION,
}


class ProblemError(Exception):
    """Raised by a route to answer with a problem; `extensions` become extra members."""

    def __init__(self, kind: ProblemType, detail: str, *, operation_id: str | None = None,
                 extensions: Mapping[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.operation_id = operation_id
        self.extensions = dict(extensions or {})


def problem_response(kind: ProblemType, detail: str, instance: str, *,
                     operation_id: str | None = None,
                     extensions: Mapping[str, Any] | None = None,
                     headers: Mapping[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"type": kind.type, "title": kind.title, "status": kind.status,
                            "detail": detail, "instance": instance}
    if operation_id is not None:
        body["operation_id"] = operation_id
    body.update(jsonable_encoder(dict(extensions or {})))
    return JSONResponse(body, status_code=kind.status, media_type=PROBLEM_JSON, headers=headers)


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries documenting problem answers (see openapi.py for the type)."""
    return {status: {"model": Problem, "description": HTTPStatus(status).phrase}
            for status in statuses}


#: What any route may answer: auth, size, media type, validation, a bug, the store down.
COMMON_PROBLEMS = (400, 401, 405, 413, 415, 422, 500, 503)


def install_problem_handlers(app: FastAPI, routes: Sequence[BaseRoute]) -> None:
    """Answer every error as a problem; `routes` are all the app's routes (for 405's Allow)."""

    async def on_http(request: Request, exc: HTTPException) -> JSONResponse:
        return _on_http(request, exc, routes)

    app.add_exception_handler(ProblemError, _on_problem)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _on_validation)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, on_http)  # type: ignore[arg-type]
    for error in _BY_ERROR:
        app.add_exception_handler(error, _on_reconciler_error)  # type: ignore[arg-type]
    app.add_exception_handler(InternalError, _on_store_refusal)  # type: ignore[arg-type]


async def _on_problem(request: Request, exc: ProblemError) -> JSONResponse:
    return problem_response(exc.kind, exc.detail, request.url.path,
                            operation_id=exc.operation_id, extensions=exc.extensions)


async def _on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = [{"loc": list(e.get("loc", ())), "msg": _plain(e.get("msg", "")),
               "type": e.get("type", "")} for e in exc.errors()]
    if any(e["type"] == "json_invalid" for e in errors):
        return problem_response(MALFORMED_JSON, "the request body is not valid JSON",
                                request.url.path)
    fields = ", ".join(".".join(map(str, e["loc"])) for e in errors)
    return problem_response(VALIDATION, f"{len(errors)} invalid field(s): {fields}",
                            request.url.path, extensions={"errors": errors})


#: An enum member as Python shows it, `<Verdict.VERIFIED_APPLIED: 'verified_applied'>`: what
#: pydantic writes for each value a `Literal[SomeEnum.X]` allows.
_ENUM_REPR = re.compile(r"<\w+\.\w+: ('[^'<>]*')>")


def _plain(message: str) -> str:
    """A validation message with enum members as the values a client sends ('weak')."""
    return _ENUM_REPR.sub(r"\1", message)


def _on_http(request: Request, exc: HTTPException, routes: Sequence[BaseRoute]) -> JSONResponse:
    kind = _BY_STATUS.get(exc.status_code) or ProblemType(
        f"http-{exc.status_code}", exc.status_code, HTTPStatus(exc.status_code).phrase)
    detail = {NOT_FOUND: f"no route for {request.url.path}",
              METHOD_NOT_ALLOWED: f"{request.method} is not allowed on {request.url.path}",
              }.get(kind, str(exc.detail))
    headers = dict(exc.headers or {})
    if kind is METHOD_NOT_ALLOWED:
        # Starlette names the methods of the first route that matched the path; GET and POST on
        # one path are separate routes here, so list every route's.
        headers["Allow"] = ", ".join(sorted(
            {m for route in routes if isinstance(route, Route)
             and route.matches(request.scope)[0] is not Match.NONE for m in route.methods or ()}))
    return problem_response(kind, detail, request.url.path, headers=headers)


async def _on_reconciler_error(request: Request, exc: ReconcilerError) -> JSONResponse:
    kind = next(k for cls, k in _BY_ERROR.items() if isinstance(exc, cls))
    detail = str(exc)
    if kind is STORE_UNAVAILABLE:
        # The driver's message names hosts and users; the log keeps it, the client needs less.
        log.warning("store unavailable on %s %s: %s", request.method, request.url.path, exc)
        detail = "the receipt store cannot be reached; nothing was recorded, try again later"
    extensions = {}
    if isinstance(exc, FactTimeError):
        extensions["errors"] = [{"loc": ["body", "at"], "msg": exc.kind.replace("_", " "),
                                 "type": exc.kind}]
    return problem_response(kind, detail, request.url.path, operation_id=exc.operation_id,
                            extensions=extensions)


async def _on_store_refusal(request: Request, exc: InternalError) -> JSONResponse:
    """The database refused the transaction for a state of its own, not for the request: on
    PostgreSQL a read-only transaction (a standby after a failover, default_transaction_read_only),
    one already aborted: nothing was recorded, and the same request may pass later."""
    log.warning("store refused %s %s: %s", request.method, request.url.path, exc.orig)
    return problem_response(STORE_UNAVAILABLE, "the receipt store refused the write; nothing "
                            "was recorded, try again later", request.url.path)


class SafetyNet:
    """Outermost middleware: anything unexpected becomes a 500 problem with a correlation id.

    It sits outside FastAPI's exception handlers, so it only sees what they did not map; it
    answers instead of Starlette's plain-text 500 and keeps the traceback in our log only.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            correlation_id = uuid.uuid4().hex
            log.exception("unexpected error %s on %s %s", correlation_id, scope.get("method"),
                          scope.get("path"))
            if started:
                raise
            response = problem_response(
                INTERNAL, f"unexpected error; quote correlation id {correlation_id}",
                str(scope.get("path", "")), extensions={"correlation_id": correlation_id})
            await response(scope, receive, send)
