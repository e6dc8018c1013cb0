"""Every sidecar call as data: what to send and how to read the answer. The sync and async
clients only differ in how they send, so the API is written once, here."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from reconciler.core.errors import RetryNotGrantedError, ServiceError, UnknownOperationError
from reconciler.core.schemas import (
    ApprovalIn,
    AttemptIn,
    IntentIn,
    ObservationIn,
    OperationListOut,
    OperationOut,
    ReceiptIn,
    ResolutionIn,
    RetryIn,
    RetryOut,
)

T = TypeVar("T")

#: Retry answers that are refusals rather than errors (IETF Idempotency-Key draft statuses).
REFUSAL_STATUSES = frozenset({409, 422})
#: The problem type of an opening refused for want of the live retry grant: do not send.
NOT_GRANTED = "https://reconciler.dev/problems/retry-not-granted"
#: The problem type of a call refused before the sidecar read any of it, for being one too
#: many in flight (service.admission): the same call may be sent again, as Retry-After asks.
OVERLOADED = "https://reconciler.dev/problems/overloaded"
#: How long one call may spend, by default, waiting out the sidecar's overloaded answers.
OVERLOAD_DEADLINE_S = 5.0


@dataclass(frozen=True, slots=True)
class RecordedOut(Generic[T]):
    """An answer to a recording call: the operation as it now stands, and whether the call
    created something (False for an identical repeat)."""

    value: T
    created: bool


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    read: Callable[[httpx.Response], T]
    operation_id: str | None = None
    body: BaseModel | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def request(self, client: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        content = self.body.model_dump_json(exclude_none=True) if self.body else None
        return client.build_request(
            self.method, self.path, content=content, params=self.params or None,
            headers={"Content-Type": "application/json"} if content else None)

    def parse(self, response: httpx.Response) -> T:
        if response.status_code == 404 and self.operation_id is not None:
            raise UnknownOperationError(
                f"the sidecar has no operation {self.operation_id!r}; record its intent first",
                operation_id=self.operation_id)
        return self.read(response)


def overload_wait(response: httpx.Response, waited_s: float, deadline_s: float) -> float | None:
    """Seconds to wait before sending the same call again: when the sidecar refused it as
    overloaded (503 `overloaded`: nothing of it was read or recorded, so this resends the
    bookkeeping call, never the provider's) and the wait Retry-After asks fits in what is left
    of `deadline_s` after `waited_s`. None: the answer is the caller's (raised as usual)."""
    if response.status_code != 503 or not response.headers.get("content-type", "").startswith(
            "application/problem+json"):
        return None
    try:
        asked = float(response.headers.get("retry-after", ""))
        if response.json().get("type") != OVERLOADED:
            return None
    except ValueError:  # an HTTP-date, or no number: the sidecar sends neither
        return None
    # A little later than asked, each caller by its own amount: callers refused together do
    # not all come back in the same instant.
    wait = max(0.0, asked) * (1 + random.random() / 4)
    return wait if waited_s + wait <= deadline_s else None


def _problem(response: httpx.Response, operation_id: str | None) -> ServiceError:
    try:
        problem = response.json()
    except ValueError:
        problem = {"detail": response.text[:200]}
    if not isinstance(problem, dict):
        problem = {"detail": str(problem)[:200]}
    return ServiceError(response.status_code, problem, operation_id)


def _model(model: type[BaseModel], operation_id: str | None) -> Callable[[httpx.Response], Any]:
    def read(response: httpx.Response) -> Any:
        if response.is_success:
            return model.model_validate_json(response.content)
        raise _problem(response, operation_id)
    return read


def _recorded(operation_id: str) -> Callable[[httpx.Response], RecordedOut[OperationOut]]:
    def read(response: httpx.Response) -> RecordedOut[OperationOut]:
        if response.is_success:
            return RecordedOut(OperationOut.model_validate_json(response.content),
                            response.status_code == 201)
        error = _problem(response, operation_id)
        if error.problem.get("type") == NOT_GRANTED:
            # Branch on the type, never the prose (RFC 9457): the sidecar refused to open the
            # attempt, so nothing may be sent.
            raise RetryNotGrantedError(str(error.problem.get("detail") or error),
                                       operation_id=operation_id) from error
        raise error
    return read


def _retry_answer(operation_id: str) -> Callable[[httpx.Response], RetryOut]:
    """A refusal (409 another holder, 422 another key or hash) is an answer, not an error:
    the problem document carries the same fields as a 200."""
    def read(response: httpx.Response) -> RetryOut:
        if response.is_success or response.status_code in REFUSAL_STATUSES:
            data = response.json()
            if response.is_success or "allowed" in data:
                return RetryOut.model_validate(data)
        raise _problem(response, operation_id)
    return read


def _op(operation_id: str, suffix: str = "") -> str:
    return f"/v1/operations/{quote(operation_id, safe='')}{suffix}"


def record_intent(intent: IntentIn) -> Call[RecordedOut[OperationOut]]:
    return Call("POST", "/v1/operations", _recorded(intent.operation_id), None, intent)


def record_attempt(operation_id: str, attempt: AttemptIn) -> Call[RecordedOut[OperationOut]]:
    return Call("POST", _op(operation_id, "/attempts"), _recorded(operation_id), operation_id,
                attempt)


def record_evidence(operation_id: str,
                    evidence: ReceiptIn | ObservationIn) -> Call[RecordedOut[OperationOut]]:
    return Call("POST", _op(operation_id, "/evidence"), _recorded(operation_id), operation_id,
                evidence)


def get_operation(operation_id: str) -> Call[OperationOut]:
    return Call("GET", _op(operation_id), _model(OperationOut, operation_id), operation_id)


def ask_retry(operation_id: str, retry: RetryIn) -> Call[RetryOut]:
    return Call("POST", _op(operation_id, "/retry"), _retry_answer(operation_id), operation_id,
                retry)


def reconcile(operation_id: str) -> Call[OperationOut]:
    return Call("POST", _op(operation_id, "/reconcile"), _model(OperationOut, operation_id),
                operation_id)


def resolve(operation_id: str, resolution: ResolutionIn) -> Call[RecordedOut[OperationOut]]:
    return Call("POST", _op(operation_id, "/resolution"), _recorded(operation_id),
                operation_id, resolution)


def approve(operation_id: str, approval: ApprovalIn) -> Call[RecordedOut[OperationOut]]:
    return Call("POST", _op(operation_id, "/approval"), _recorded(operation_id), operation_id,
                approval)


def list_operations(verdict: str | None, escalated: bool | None, after: str | None,
                    limit: int) -> Call[OperationListOut]:
    params = {k: v for k, v in {"verdict": verdict, "after": after, "limit": limit,
                                "escalated": None if escalated is None else str(escalated).lower()
                                }.items() if v is not None}
    return Call("GET", "/v1/operations", _model(OperationListOut, None), None, None, params)
