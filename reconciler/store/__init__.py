"""The receipt store: where intents, attempts and evidence live.

`Store` is the seam: a handful of methods a test can fake in a few lines. `SqlStore` is the real
one (SQLite by default, any SQLAlchemy URL otherwise), opened with `open_store(url)`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from reconciler.domain import (
    Attempt,
    Decision,
    Evidence,
    Facts,
    Intent,
    ProviderContract,
    Verdict,
)
from reconciler.verdicts import NextAction

#: The decision a store caches for an operation when it records the intent: nothing is known
#: yet. A caller that decides the same from the intent alone has nothing to read back.
FIRST_DECISION = (Verdict.INDETERMINATE, NextAction.RECONCILE)


class Store(Protocol):
    """What the reconciler needs from a store of facts."""

    def record_intent(self, intent: Intent) -> bool:
        """Record an intent; True if new (its cached decision is FIRST_DECISION), False for
        an identical repeat.

        Raises IntentConflictError (after recording the conflict as evidence) when the id
        exists with another hash or key.
        """

    def record_attempt(self, attempt: Attempt) -> bool:
        """Record an attempt; True if new, False for an identical repeat."""

    def record_evidence(self, evidence: Evidence) -> None:
        """Append one piece of evidence; evidence is never changed or removed."""

    def facts(self, operation_id: str) -> Facts:
        """Everything recorded about one operation, in recorded order."""

    def contract(self, provider: str) -> ProviderContract:
        """The provider's contract; the cautious defaults when none is configured."""

    def put_contract(self, contract: ProviderContract) -> None:
        """Configure (or reconfigure) a provider's contract."""

    def decide(self, operation_id: str,
               rule: Callable[[Facts, ProviderContract, datetime], Decision],
               now: datetime) -> tuple[Facts, Decision, bool]:
        """Apply a pure rule to the operation's facts and contract, and cache the decision
        (for listing and scheduling); the facts stay the truth. Returns the facts, the
        decision, and whether a sweeper has escalated the operation to a human."""
