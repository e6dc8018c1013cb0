"""The Python client for the sidecar: `ReconcilerClient`, `AsyncReconcilerClient`, and `intent`
to describe an operation from its parameters (hashed here; the parameters never leave the
worker)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from reconciler.client.calls import RecordedOut
from reconciler.client.effects import AsyncTrackedEffect, TrackedEffect
from reconciler.client.http import AsyncReconcilerClient, ReconcilerClient
from reconciler.core.domain import Carried, Effect
from reconciler.core.hashing import derive_idempotency_key, request_hash
from reconciler.core.outcomes import outcome_of
from reconciler.core.schemas import IntentIn


def intent(operation_id: str, *, provider: str, action: str, effect: Effect | str,
           params: Any, idempotency_key: str | None = None, run_id: str | None = None,
           tool_call_id: str | None = None, derive_key: bool = False,
           correlation: Mapping[str, str] | None = None,
           carries: Collection[Carried | str] | None = None) -> IntentIn:
    """An intent for `params`, the exact body the worker will send. With `derive_key`, the
    idempotency key is derived from (run_id, tool_call_id), stable across restarts.
    `carries` says what the request carries that a probe can find its effect by (SPEC
    section 3: "operation_id" in the provider's metadata, "idempotency_key"); None: the key
    given, alone."""
    if derive_key:
        if run_id is None or tool_call_id is None:
            raise ValueError("derive_key needs run_id and tool_call_id")
        idempotency_key = derive_idempotency_key(run_id, tool_call_id)
    return IntentIn(operation_id=operation_id, request_hash=request_hash(params),
                    idempotency_key=idempotency_key, provider=provider, action=action,
                    effect=Effect(effect), run_id=run_id, tool_call_id=tool_call_id,
                    correlation=dict(correlation or {}),
                    carries=None if carries is None else [Carried(c) for c in carries])


__all__ = [
    "AsyncReconcilerClient",
    "AsyncTrackedEffect",
    "ReconcilerClient",
    "RecordedOut",
    "TrackedEffect",
    "intent",
    "outcome_of",
]
