"""Effect-receipt reconciler: evidence-backed verdicts on whether a side effect happened."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reconciler.core.domain import (
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
    from reconciler.core.hashing import derive_idempotency_key, request_hash
    from reconciler.core.verdicts import evaluate

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

#: Where each name of the package's face is defined. They are imported on first use (PEP 562),
#: so that a command such as `reconciler --help`, which imports `reconciler.cli` and with it
#: this package, does not pay for the domain and the rules (bench/cli.py).
_HOMES = {"derive_idempotency_key": "reconciler.core.hashing",
          "request_hash": "reconciler.core.hashing",
          "evaluate": "reconciler.core.verdicts"}


def __getattr__(name: str) -> object:
    if name not in __all__:
        raise AttributeError(f"module 'reconciler' has no attribute {name!r}")
    value = getattr(import_module(_HOMES.get(name, "reconciler.core.domain")), name)
    globals()[name] = value
    return value
