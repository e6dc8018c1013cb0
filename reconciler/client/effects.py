"""Wrapping a side-effecting call so that it is recorded, and never retried without a grant.

    with client.track(intent) as effect:          # records the intent before anything is sent
        response = effect.dispatch(send)          # attempt 1: recorded as dispatching, sent,
                                                  # completed with its outcome
        ...
        response = effect.dispatch(send)          # attempt 2: the gate is asked first; a refusal
                                                  # raises RetryRefusedError and nothing is sent

Each attempt has two phases: recorded as `dispatching` (with the retry grant's holder and its
token) before the first byte leaves, then completed with what came back, so a crash in between
leaves the dispatch and its time on record. Nothing is sent without a live grant: if the sidecar
refuses the opening (`retry-not-granted`: the grant expired, is another's, or new evidence
changed its verdict), RetryRefusedError is raised and nothing is sent.

Re-entering with an operation id that is already recorded (a worker restarted after a crash)
counts as a retry from the first dispatch on: the crash may have come after the send and before
the attempt was recorded, so only the gate can say whether sending again is safe.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Protocol, Self

import httpx

from reconciler.client.calls import RecordedOut
from reconciler.core.domain import Outcome
from reconciler.core.errors import RetryNotGrantedError, RetryRefusedError
from reconciler.core.outcomes import outcome_of, status_of
from reconciler.core.schemas import AttemptIn, IntentIn, MatchIn, OperationOut, RetryIn, RetryOut

ReceiptReader = Callable[[httpx.Response], MatchIn | None]


class Recorder(Protocol):
    """What a tracked effect needs of a client (`ReconcilerClient` is one)."""

    def record_intent(self, intent: IntentIn) -> RecordedOut[OperationOut]: ...

    def record_attempt(self, operation_id: str,
                       attempt: AttemptIn) -> RecordedOut[OperationOut]: ...

    def reconcile(self, operation_id: str) -> OperationOut: ...

    def ask_retry(self, operation_id: str, retry: RetryIn) -> RetryOut: ...


class AsyncRecorder(Protocol):
    """What an async tracked effect needs of a client (`AsyncReconcilerClient` is one)."""

    async def record_intent(self, intent: IntentIn) -> RecordedOut[OperationOut]: ...

    async def record_attempt(self, operation_id: str,
                             attempt: AttemptIn) -> RecordedOut[OperationOut]: ...

    async def reconcile(self, operation_id: str) -> OperationOut: ...

    async def ask_retry(self, operation_id: str, retry: RetryIn) -> RetryOut: ...


def default_holder() -> str:
    """A holder id unique to this process and call: host, pid, random suffix."""
    host = "".join(c if c.isalnum() or c in ".-" else "-" for c in socket.gethostname())
    return f"{host or 'worker'}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class _Tracking:
    """What both effect wrappers share: the intent, the attempt count, the rules."""

    def __init__(self, intent: IntentIn, holder: str | None, receipt: ReceiptReader | None,
                 ) -> None:
        self.intent = intent
        self.holder = holder or default_holder()
        self.read_receipt = receipt
        self.attempts = 0
        self.resumed = False
        self.last_answer: RetryOut | None = None
        #: The token of the retry grant last given, presented when opening its attempt.
        self.grant: str | None = None

    @property
    def operation_id(self) -> str:
        return self.intent.operation_id

    def _needs_grant(self) -> bool:
        return self.attempts > 0 or self.resumed

    def _retry_request(self) -> RetryIn:
        return RetryIn(idempotency_key=self.intent.idempotency_key,
                       request_hash=self.intent.request_hash, holder=self.holder)

    def _check(self, answer: RetryOut) -> None:
        self.last_answer = answer
        if not answer.allowed:
            raise RetryRefusedError(self.operation_id, answer.verdict.value, answer.reason,
                                    answer.findings)
        expires = answer.lease_expires_at
        if expires is not None and expires <= datetime.now(UTC):
            raise RetryRefusedError(self.operation_id, answer.verdict.value,
                                    "the retry lease expired before dispatch; ask again",
                                    answer.findings)
        if answer.attempt is not None:
            self.attempts = answer.attempt - 1  # the number the grant allows comes next
        self.grant = answer.grant

    def _opening(self, at: datetime) -> AttemptIn:
        """The next attempt, as recorded before it is sent."""
        self.attempts += 1
        return AttemptIn(attempt=self.attempts, idempotency_key=self.intent.idempotency_key,
                         request_hash=self.intent.request_hash, at=at,
                         outcome=Outcome.DISPATCHING, holder=self.holder,
                         grant=self.grant)

    def _refused(self, exc: RetryNotGrantedError) -> RetryRefusedError:
        """The sidecar would not open the attempt: nothing was sent, nor may be."""
        self.attempts -= 1
        verdict = self.last_answer.verdict.value if self.last_answer else "unknown"
        return RetryRefusedError(self.operation_id, verdict, str(exc))

    def _attempt(self, opening: AttemptIn, response: object | None,
                 error: BaseException | None) -> AttemptIn:
        """The opened attempt completed with what the caller saw. Never raises on what `send`
        returned: a send that returns an SDK object (no `status_code`) or a receipt reader
        that fails still gets its attempt completed."""
        outcome = Outcome.RESPONSE if error is None else (
            outcome_of(error) or Outcome.CONNECTION_ERROR)
        receipt = None
        if error is None and self.read_receipt is not None:
            try:
                receipt = self.read_receipt(response)  # type: ignore[arg-type]
            except Exception:
                receipt = None
        return opening.model_copy(update={
            "outcome": outcome, "receipt": receipt,
            "status": (status_of(response) or 200) if error is None else None})


class TrackedEffect(_Tracking):
    """A side effect tracked through a `ReconcilerClient`; see the module docstring."""

    def __init__(self, client: Recorder, intent: IntentIn, holder: str | None = None,
                 receipt: ReceiptReader | None = None) -> None:
        super().__init__(intent, holder, receipt)
        self.client = client

    def __enter__(self) -> Self:
        recorded = self.client.record_intent(self.intent)
        self.attempts = recorded.value.attempts_made
        self.resumed = not recorded.created
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def dispatch(self, send: Callable[[], httpx.Response]) -> httpx.Response:
        """Send once (asking the gate first if this is a retry) and record what happened."""
        if self._needs_grant():
            if self.attempts == 0:
                self.client.reconcile(self.operation_id)
            self._check(self.client.ask_retry(self.operation_id, self._retry_request()))
        opening = self._opening(datetime.now(UTC))
        try:
            self.client.record_attempt(self.operation_id, opening)
        except RetryNotGrantedError as exc:
            raise self._refused(exc) from exc
        try:
            response = send()
        except Exception as exc:
            self.client.record_attempt(self.operation_id, self._attempt(opening, None, exc))
            raise
        self.client.record_attempt(self.operation_id, self._attempt(opening, response, None))
        return response


class AsyncTrackedEffect(_Tracking):
    """The async twin of `TrackedEffect`."""

    def __init__(self, client: AsyncRecorder, intent: IntentIn,
                 holder: str | None = None, receipt: ReceiptReader | None = None) -> None:
        super().__init__(intent, holder, receipt)
        self.client = client

    async def __aenter__(self) -> Self:
        recorded = await self.client.record_intent(self.intent)
        self.attempts = recorded.value.attempts_made
        self.resumed = not recorded.created
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def dispatch(self, send: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
        """Send once (asking the gate first if this is a retry) and record what happened."""
        if self._needs_grant():
            if self.attempts == 0:
                await self.client.reconcile(self.operation_id)
            self._check(await self.client.ask_retry(self.operation_id, self._retry_request()))
        opening = self._opening(datetime.now(UTC))
        try:
            await self.client.record_attempt(self.operation_id, opening)
        except RetryNotGrantedError as exc:
            raise self._refused(exc) from exc
        try:
            response = await send()
        except Exception as exc:
            await self.client.record_attempt(self.operation_id,
                                             self._attempt(opening, None, exc))
            raise
        await self.client.record_attempt(self.operation_id,
                                         self._attempt(opening, response, None))
        return response
