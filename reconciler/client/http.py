"""Sync and async clients for the sidecar, on httpx. Each method is one call from `calls`; the
two classes differ only in how a call is sent.

A call the sidecar refused as overloaded (503 `overloaded`, before reading any of it) is sent
again as its Retry-After asks, for as long as `overload_deadline_s` allows; past that the
refusal is raised as any other problem (`ServiceError`, status 503). Everything built on the
clients (`@effect`, `track`, the framework adapters) waits the same way.
"""

from __future__ import annotations

import asyncio
import os
import time
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from reconciler.client import calls
from reconciler.client.calls import OVERLOAD_DEADLINE_S, Call, RecordedOut, overload_wait
from reconciler.client.effects import AsyncTrackedEffect, ReceiptReader, TrackedEffect
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
DEFAULT_URL = "http://127.0.0.1:8765"
#: Short by default: the sidecar is local, and a worker must not hang on its bookkeeping.
DEFAULT_TIMEOUT = httpx.Timeout(5.0, connect=2.0)


def send_patiently(http: httpx.Client, request: httpx.Request, deadline_s: float, *,
                   stream: bool = False) -> httpx.Response:
    """`request`'s answer, sent again while the sidecar refuses it as overloaded (module doc),
    within `deadline_s`. Streamed, a refusal is read whole; the answer is the caller's to read
    and close."""
    started = time.monotonic()
    while True:
        response = http.send(request, stream=stream)
        if stream and response.status_code == 503:
            response.read()
        wait = overload_wait(response, time.monotonic() - started, deadline_s)
        if wait is None:
            return response
        response.close()
        time.sleep(wait)


def _settings(base_url: str | None, token: str | None) -> dict[str, Any]:
    token = token if token is not None else os.environ.get("RECONCILER_TOKEN")
    return {"base_url": base_url or os.environ.get("RECONCILER_URL", DEFAULT_URL),
            "headers": {"Authorization": f"Bearer {token}"} if token else {}}


class ReconcilerClient:
    """Talks to the sidecar. The token defaults to $RECONCILER_TOKEN, the URL to
    $RECONCILER_URL or http://127.0.0.1:8765. `overload_deadline_s`: how long one call may
    spend waiting out the sidecar's overloaded answers (module doc)."""

    def __init__(self, base_url: str | None = None, *, token: str | None = None,
                 timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
                 transport: httpx.BaseTransport | None = None,
                 overload_deadline_s: float = OVERLOAD_DEADLINE_S) -> None:
        self.http = httpx.Client(timeout=timeout, transport=transport,
                                 **_settings(base_url, token))
        self.overload_deadline_s = overload_deadline_s

    def send(self, call: Call[T]) -> T:
        return call.parse(send_patiently(self.http, call.request(self.http),
                                         self.overload_deadline_s))

    def record_intent(self, intent: IntentIn) -> RecordedOut[OperationOut]:
        return self.send(calls.record_intent(intent))

    def record_attempt(self, operation_id: str, attempt: AttemptIn) -> RecordedOut[OperationOut]:
        return self.send(calls.record_attempt(operation_id, attempt))

    def record_evidence(self, operation_id: str,
                        evidence: ReceiptIn | ObservationIn) -> RecordedOut[OperationOut]:
        return self.send(calls.record_evidence(operation_id, evidence))

    def get(self, operation_id: str) -> OperationOut:
        return self.send(calls.get_operation(operation_id))

    def ask_retry(self, operation_id: str, retry: RetryIn) -> RetryOut:
        return self.send(calls.ask_retry(operation_id, retry))

    def reconcile(self, operation_id: str) -> OperationOut:
        return self.send(calls.reconcile(operation_id))

    def resolve(self, operation_id: str, resolution: ResolutionIn) -> RecordedOut[OperationOut]:
        return self.send(calls.resolve(operation_id, resolution))

    def approve(self, operation_id: str, approval: ApprovalIn) -> RecordedOut[OperationOut]:
        return self.send(calls.approve(operation_id, approval))

    def list(self, *, verdict: str | None = None, escalated: bool | None = None,
             after: str | None = None, limit: int = 50) -> OperationListOut:
        return self.send(calls.list_operations(verdict, escalated, after, limit))

    def track(self, intent: IntentIn, *, holder: str | None = None,
              receipt: ReceiptReader | None = None) -> TrackedEffect:
        """A context manager around one side effect: see `reconciler.client.effects`."""
        return TrackedEffect(self, intent, holder, receipt)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncReconcilerClient:
    """The async twin of `ReconcilerClient`: the same methods, awaited."""

    def __init__(self, base_url: str | None = None, *, token: str | None = None,
                 timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
                 transport: httpx.AsyncBaseTransport | None = None,
                 overload_deadline_s: float = OVERLOAD_DEADLINE_S) -> None:
        self.http = httpx.AsyncClient(timeout=timeout, transport=transport,
                                      **_settings(base_url, token))
        self.overload_deadline_s = overload_deadline_s

    async def send(self, call: Call[T]) -> T:
        started = time.monotonic()
        while True:
            response = await self.http.send(call.request(self.http))
            wait = overload_wait(response, time.monotonic() - started, self.overload_deadline_s)
            if wait is None:
                return call.parse(response)
            await asyncio.sleep(wait)

    async def record_intent(self, intent: IntentIn) -> RecordedOut[OperationOut]:
        return await self.send(calls.record_intent(intent))

    async def record_attempt(self, operation_id: str,
                             attempt: AttemptIn) -> RecordedOut[OperationOut]:
        return await self.send(calls.record_attempt(operation_id, attempt))

    async def record_evidence(self, operation_id: str,
                              evidence: ReceiptIn | ObservationIn) -> RecordedOut[OperationOut]:
        return await self.send(calls.record_evidence(operation_id, evidence))

    async def get(self, operation_id: str) -> OperationOut:
        return await self.send(calls.get_operation(operation_id))

    async def ask_retry(self, operation_id: str, retry: RetryIn) -> RetryOut:
        return await self.send(calls.ask_retry(operation_id, retry))

    async def reconcile(self, operation_id: str) -> OperationOut:
        return await self.send(calls.reconcile(operation_id))

    async def resolve(self, operation_id: str,
                      resolution: ResolutionIn) -> RecordedOut[OperationOut]:
        return await self.send(calls.resolve(operation_id, resolution))

    async def approve(self, operation_id: str, approval: ApprovalIn) -> RecordedOut[OperationOut]:
        return await self.send(calls.approve(operation_id, approval))

    async def list(self, *, verdict: str | None = None, escalated: bool | None = None,
                   after: str | None = None, limit: int = 50) -> OperationListOut:
        return await self.send(calls.list_operations(verdict, escalated, after, limit))

    def track(self, intent: IntentIn, *, holder: str | None = None,
              receipt: ReceiptReader | None = None) -> AsyncTrackedEffect:
        """An async context manager around one side effect."""
        return AsyncTrackedEffect(self, intent, holder, receipt)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()
