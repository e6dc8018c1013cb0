"""The retry gate: the one place a retry of a side effect is allowed to start.

A worker asks with the idempotency key and request hash it is about to use. The gate answers
yes only when SPEC rule 6 allows it (the engine's `retry_allowed`), the caller's key and hash are
the intent's, and the caller wins the retry lease, which exactly one caller holds at a time:

    ask ── granted ───────────── lease_expires_at ─────▶
            │ the holder dispatches    │ not dispatched by now? the grant lapses; the
            │ and records attempt n+1  │ holder must ask again before sending anything

A caller that asks with another key or hash is refused and recorded as a refused retry, which the
engine counts as unsafe (rule 2): the worker is about to send something the intent never covered.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from reconciler.domain import RefusedRetry, Verdict
from reconciler.ledger import Ledger
from reconciler.ports import Leases


class GateResult(StrEnum):
    """Why the gate answered as it did; maps onto HTTP statuses in the service."""

    GRANTED = "granted"
    #: The verdict does not allow a retry (yet, or ever); the reason says which.
    REFUSED = "refused"
    #: Another caller holds the retry lease (IETF Idempotency-Key draft: 409).
    IN_PROGRESS = "in_progress"
    #: The caller's key or hash is not the intent's (IETF Idempotency-Key draft: 422).
    MISMATCH = "mismatch"


@dataclass(frozen=True, slots=True)
class RetryRequest:
    operation_id: str
    idempotency_key: str | None
    request_hash: str
    holder: str


@dataclass(frozen=True, slots=True)
class GateAnswer:
    result: GateResult
    verdict: Verdict
    reason: str
    findings: tuple[str, ...]
    lease_expires_at: datetime | None = None

    @property
    def allowed(self) -> bool:
        return self.result is GateResult.GRANTED


class RetryGate:
    """Decides retry requests against the ledger, and hands out the retry lease."""

    def __init__(self, ledger: Ledger, leases: Leases, lease_ttl_s: float = 60.0) -> None:
        self.ledger = ledger
        self.leases = leases
        self.lease_ttl_s = lease_ttl_s

    def ask(self, request: RetryRequest) -> GateAnswer:
        now = self.ledger.clock()
        judgement = self.ledger.judge(request.operation_id, now)
        intent = judgement.facts.intent
        if (request.idempotency_key, request.request_hash) != (intent.idempotency_key,
                                                                intent.request_hash):
            judgement = self.ledger.record_evidence(RefusedRetry(
                request.operation_id, now, request.request_hash, request.idempotency_key,
                request.holder))
            return GateAnswer(
                GateResult.MISMATCH, judgement.decision.verdict,
                "the retry would use another idempotency key or request hash than the "
                "recorded intent; a retry must resend the same operation (recorded as "
                "unsafe_retry evidence)", judgement.decision.findings)
        decision = judgement.decision
        if not decision.retry_allowed:
            return GateAnswer(GateResult.REFUSED, decision.verdict,
                              f"retry not allowed: verdict {decision.verdict.value}, next action "
                              f"{decision.next_action}", decision.findings)
        expires = self.leases.acquire_retry(request.operation_id, request.holder, now,
                                            self.lease_ttl_s)
        if expires is None:
            return GateAnswer(GateResult.IN_PROGRESS, decision.verdict,
                              "another caller holds the retry lease for this operation",
                              decision.findings)
        return GateAnswer(GateResult.GRANTED, decision.verdict,
                          f"granted to {request.holder}: dispatch once, with the same key and "
                          "parameters, before the lease expires", decision.findings, expires)
