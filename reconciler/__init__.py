"""Effect-receipt reconciler: evidence-backed verdicts on whether a side effect happened."""

from reconciler.domain import (
    Approval,
    Attempt,
    Authority,
    Decision,
    Effect,
    Facts,
    Intent,
    Match,
    Observation,
    Outcome,
    ProviderContract,
    Receipt,
    Resolution,
    Verdict,
)
from reconciler.hashing import derive_idempotency_key, request_hash
from reconciler.verdicts import evaluate

__all__ = [
    "Approval",
    "Attempt",
    "Authority",
    "Decision",
    "Effect",
    "Facts",
    "Intent",
    "Match",
    "Observation",
    "Outcome",
    "ProviderContract",
    "Receipt",
    "Resolution",
    "Verdict",
    "derive_idempotency_key",
    "evaluate",
    "request_hash",
]
