"""Domain facts and decisions rendered in the wire format of reconciler.core.schemas. Nothing
else."""

from __future__ import annotations

from reconciler.core.domain import (
    Approval,
    Attempt,
    Authority,
    Compensation,
    Evidence,
    IntentConflict,
    Match,
    Observation,
    Receipt,
    RefusedRetry,
    Resolution,
    Verdict,
)
from reconciler.core.ports import OperationSummary
from reconciler.core.schemas import (
    AttemptOut,
    EvidenceOut,
    IntentOut,
    MatchOut,
    OperationOut,
    OperationSummaryOut,
    RetryOut,
)
from reconciler.ledger import Judgement
from reconciler.ledger.gate import GateAnswer


def _match(match: Match) -> MatchOut:
    return MatchOut(provider_ref=match.provider_ref, request_hash=match.request_hash)


def attempt_out(attempt: Attempt) -> AttemptOut:
    return AttemptOut(attempt=attempt.number, idempotency_key=attempt.idempotency_key,
                      request_hash=attempt.request_hash, at=attempt.at, outcome=attempt.outcome,
                      status=attempt.status,
                      receipt=_match(attempt.receipt) if attempt.receipt else None,
                      recorded_at=attempt.recorded_at)


def evidence_out(evidence: Evidence) -> EvidenceOut:
    match evidence:
        case Receipt():
            return EvidenceOut(kind="receipt", at=evidence.at, source=evidence.source,
                               provider_ref=evidence.provider_ref,
                               request_hash=evidence.request_hash,
                               recorded_at=evidence.recorded_at)
        case Observation():
            return EvidenceOut(kind="observation", at=evidence.at, source=evidence.probe,
                               authority=evidence.authority,
                               matches=[_match(m) for m in evidence.matches],
                               error=evidence.error, recorded_at=evidence.recorded_at)
        case Resolution():
            return EvidenceOut(kind="resolution", at=evidence.at, authority=Authority.HUMAN,
                               verdict=evidence.verdict, actor=evidence.actor, note=evidence.note)
        case Approval():
            return EvidenceOut(kind="approval", at=evidence.at, authority=Authority.HUMAN,
                               actor=evidence.actor, note=evidence.note)
        case IntentConflict():
            return EvidenceOut(kind="intent_conflict", at=evidence.at,
                               request_hash=evidence.request_hash,
                               idempotency_key=evidence.idempotency_key)
        case RefusedRetry():
            return EvidenceOut(kind="refused_retry", at=evidence.at,
                               request_hash=evidence.request_hash,
                               idempotency_key=evidence.idempotency_key, actor=evidence.holder)
        case Compensation():
            return EvidenceOut(kind="compensation", at=evidence.at, authority=Authority.HUMAN,
                               actor=evidence.actor, note=evidence.note,
                               provider_ref=evidence.reference)
    raise TypeError(f"not evidence: {type(evidence).__name__}")


def operation_out(judgement: Judgement, escalated: bool) -> OperationOut:
    facts, decision = judgement.facts, judgement.decision
    intent = facts.intent
    return OperationOut(
        intent=IntentOut(operation_id=intent.operation_id, request_hash=intent.request_hash,
                         idempotency_key=intent.idempotency_key, provider=intent.provider,
                         action=intent.action, effect=intent.effect, at=intent.at,
                         run_id=intent.run_id, tool_call_id=intent.tool_call_id,
                         correlation=dict(intent.correlation),
                         carries=None if intent.carries is None else sorted(intent.carries)),
        attempts=[attempt_out(a) for a in facts.attempts],
        evidence=[evidence_out(e) for e in facts.evidence],
        verdict=decision.verdict, findings=list(decision.findings),
        next_action=decision.next_action, retry_allowed=decision.retry_allowed,
        escalated=escalated, evaluated_at=judgement.at)


def retry_out(answer: GateAnswer, holder: str) -> RetryOut:
    return RetryOut(allowed=answer.allowed, verdict=answer.verdict, reason=answer.reason,
                    lease_expires_at=answer.lease_expires_at, holder=holder,
                    findings=list(answer.findings), attempt=answer.attempt,
                    grant=answer.token)


def summary_out(summary: OperationSummary) -> OperationSummaryOut:
    return OperationSummaryOut(
        operation_id=summary.operation_id, provider=summary.provider, action=summary.action,
        verdict=Verdict(summary.verdict),
        next_action=summary.next_action, escalated=summary.escalated,
        updated_at=summary.updated_at, reason=summary.reason)
