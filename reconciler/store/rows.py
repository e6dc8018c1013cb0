"""Translation between domain facts and table rows (ORM rows or Core rows of the same
columns), both ways. Nothing else."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Row

from reconciler.core.domain import (
    Approval,
    Attempt,
    Authority,
    Carried,
    Compensation,
    Effect,
    Evidence,
    Intent,
    IntentConflict,
    Match,
    Observation,
    Outcome,
    ProviderContract,
    Receipt,
    RefusedRetry,
    Resolution,
    Verdict,
)
from reconciler.core.ports import ERROR_CHARS
from reconciler.store.tables import AttemptRow, EvidenceRow, IntentRow, ProviderRow


def intent_values(intent: Intent) -> dict[str, Any]:
    return {
        "operation_id": intent.operation_id, "request_hash": intent.request_hash,
        "idempotency_key": intent.idempotency_key, "provider": intent.provider,
        "action": intent.action, "effect": intent.effect.value, "at": intent.at,
        "run_id": intent.run_id, "tool_call_id": intent.tool_call_id,
        # Most intents carry none: the text json.dumps gives an empty dict, without its 2 us.
        "correlation": json.dumps(dict(intent.correlation)) if intent.correlation else "{}",
        "carries": carries_text(intent.carries)}


def carries_text(carries: frozenset[Carried] | None) -> str | None:
    """The `carries` column: the values sorted and comma-joined, "" for nothing carried, None
    when the worker did not say (SPEC section 3 reads that as the recorded key alone)."""
    return None if carries is None else ",".join(sorted(c.value for c in carries))


def carries_of(text: str | None) -> frozenset[Carried] | None:
    if text is None:
        return None
    return frozenset(Carried(value) for value in text.split(",") if value)


def state_values(intent: Intent, verdict: Verdict, next_action: str) -> dict[str, Any]:
    """The state row an intent is born with, holding its first decision."""
    return {"operation_id": intent.operation_id, "verdict": verdict.value,
            "next_action": next_action, "updated_at": intent.at, "escalated": False,
            "probe_count": 0}


def intent_of(row: IntentRow | Row[Any]) -> Intent:
    return Intent(
        operation_id=row.operation_id, request_hash=row.request_hash,
        idempotency_key=row.idempotency_key, provider=row.provider, action=row.action,
        effect=Effect(row.effect), at=row.at, run_id=row.run_id, tool_call_id=row.tool_call_id,
        correlation=json.loads(row.correlation) if row.correlation != "{}" else {},
        carries=carries_of(row.carries))


def attempt_values(attempt: Attempt, report: int = 0) -> dict[str, Any]:
    """The row of `attempt` as its attempt's report number `report` (0: the first)."""
    return {
        "operation_id": attempt.operation_id, "number": attempt.number, "report": report,
        "idempotency_key": attempt.idempotency_key, "request_hash": attempt.request_hash,
        "at": attempt.at, "outcome": attempt.outcome.value, "status": attempt.status,
        "receipt_ref": attempt.receipt.provider_ref if attempt.receipt else None,
        "receipt_hash": attempt.receipt.request_hash if attempt.receipt else None,
        "recorded_at": attempt.recorded_at, "completed_at": attempt.completed_at,
        "ungranted": attempt.ungranted}


def attempt_of(row: AttemptRow | Row[Any]) -> Attempt:
    return Attempt(
        operation_id=row.operation_id, number=row.number, idempotency_key=row.idempotency_key,
        request_hash=row.request_hash, at=row.at, outcome=Outcome(row.outcome),
        status=row.status,
        receipt=Match(row.receipt_ref, row.receipt_hash) if row.receipt_ref is not None else None,
        recorded_at=row.recorded_at, completed_at=row.completed_at, ungranted=row.ungranted)


#: Every evidence column a kind may leave empty: each row names them all, so that every kind
#: shares one compiled INSERT.
_UNUSED = dict.fromkeys(("source", "authority", "provider_ref", "request_hash", "idempotency_key",
                         "matches", "error", "verdict", "actor", "note", "attempts_known"))


def evidence_values(evidence: Evidence) -> dict[str, Any]:
    recorded_at = evidence.recorded_at if isinstance(evidence, Receipt | Observation) else None
    return {**_UNUSED, "operation_id": evidence.operation_id, "at": evidence.at,
            "recorded_at": recorded_at, **_evidence_columns(evidence)}


def _evidence_columns(evidence: Evidence) -> dict[str, Any]:
    match evidence:
        case Receipt():
            return {"kind": "receipt", "source": evidence.source,
                    "provider_ref": evidence.provider_ref, "request_hash": evidence.request_hash}
        case Observation():
            matches = [{"provider_ref": m.provider_ref, "request_hash": m.request_hash}
                       for m in evidence.matches]
            return {"kind": "observation", "source": evidence.probe,
                    "authority": evidence.authority.value, "matches": json.dumps(matches),
                    "error": evidence.error[:ERROR_CHARS] if evidence.error else None}
        case Resolution():
            return {"kind": "resolution", "authority": Authority.HUMAN.value,
                    "verdict": evidence.verdict.value, "actor": evidence.actor,
                    "note": evidence.note, "attempts_known": evidence.attempts_known}
        case Approval():
            return {"kind": "approval", "authority": Authority.HUMAN.value,
                    "actor": evidence.actor, "note": evidence.note}
        case IntentConflict():
            return {"kind": "intent_conflict", "request_hash": evidence.request_hash,
                    "idempotency_key": evidence.idempotency_key}
        case RefusedRetry():
            return {"kind": "refused_retry", "request_hash": evidence.request_hash,
                    "idempotency_key": evidence.idempotency_key, "actor": evidence.holder}
        case Compensation():
            return {"kind": "compensation", "authority": Authority.HUMAN.value,
                    "actor": evidence.actor, "note": evidence.note,
                    "provider_ref": evidence.reference}
    raise TypeError(f"not evidence: {evidence!r}")


def evidence_of(row: EvidenceRow | Row[Any]) -> Evidence:
    op, at = row.operation_id, row.at
    match row.kind:
        case "receipt":
            return Receipt(op, at, row.provider_ref or "", row.request_hash, row.source or "",
                           row.recorded_at)
        case "observation":
            matches = tuple(Match(m["provider_ref"], m.get("request_hash"))
                            for m in json.loads(row.matches or "[]"))
            return Observation(op, at, row.source or "", Authority(row.authority or ""), matches,
                               row.error, row.recorded_at)
        case "resolution":
            return Resolution(op, at, Verdict(row.verdict or ""), row.actor or "", row.note or "",
                              row.attempts_known)
        case "approval":
            return Approval(op, at, row.actor or "", row.note or "")
        case "intent_conflict":
            return IntentConflict(op, at, row.request_hash or "", row.idempotency_key)
        case "refused_retry":
            return RefusedRetry(op, at, row.request_hash or "", row.idempotency_key,
                                row.actor or "")
        case "compensation":
            return Compensation(op, at, row.actor or "", row.note or "", row.provider_ref or "")
    raise ValueError(f"unknown evidence kind {row.kind!r} in row {row.id}")


def provider_row(contract: ProviderContract) -> ProviderRow:
    return ProviderRow(
        name=contract.name, idempotency_keys=contract.idempotency_keys,
        key_retention_s=contract.key_retention_s, visibility_lag_s=contract.visibility_lag_s,
        max_attempts=contract.max_attempts, reconcile_deadline_s=contract.reconcile_deadline_s,
        compensable=contract.compensable, inflight_s=contract.inflight_s)


def contract_of(row: ProviderRow | Row[Any]) -> ProviderContract:
    return ProviderContract(
        name=row.name, idempotency_keys=row.idempotency_keys,
        key_retention_s=row.key_retention_s, visibility_lag_s=row.visibility_lag_s,
        max_attempts=row.max_attempts, reconcile_deadline_s=row.reconcile_deadline_s,
        compensable=row.compensable, inflight_s=row.inflight_s)
