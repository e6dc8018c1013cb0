"""What a kill-harness worker (kill_harness.py) logs of its gate, and the charge a keyless
worker sends: without the operation id in its metadata, as a tool that attaches none would."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.core.schemas import AttemptIn

sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
from sandbox_charge import Payments

#: One entry of a worker's gate log: what it sent or recorded, or what the gate answered, and
#: when (Unix seconds; a record_attempt's `at` is its dispatch time).
Logged = dict[str, Any]


def logged(name: str, result: Any, *args: Any) -> Logged | None:
    """The log entry of a Recorder call: a dispatch, a verdict, a retry answer."""
    if name == "record_attempt":
        attempt: AttemptIn = args[1]
        return {"call": name, "at": attempt.at.timestamp() if attempt.at else time.time(),
                "attempt": attempt.attempt, "outcome": attempt.outcome.value}
    if name == "reconcile":
        return {"call": name, "at": time.time(), "verdict": result.verdict.value,
                "findings": list(result.findings), "next_action": result.next_action,
                "escalated": result.escalated}
    if name == "ask_retry":
        return {"call": name, "at": time.time(), "verdict": result.verdict.value,
                "findings": list(result.findings), "allowed": result.allowed}
    return None


def untagged(body: Mapping[str, Any]) -> dict[str, Any]:
    """`body` without the operation id in its metadata (the order stays)."""
    metadata = {k: v for k, v in body["metadata"].items() if k != "operation_id"}
    return {**body, "metadata": metadata}


@dataclass
class UntaggedPayments(Payments):
    """The charge as a tool that attaches no operation id sends it (the examples' tool tags
    every PaymentIntent): a keyless worker's, whose intents say they carry nothing."""

    def send(self, body: Mapping[str, Any], key: str | None) -> dict[str, Any]:
        return super().send(untagged(body), key)
