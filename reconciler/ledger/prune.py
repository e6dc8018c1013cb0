"""Forgetting settled operations: `reconciler prune` and the sweep's retention pass.

What is removed can be written first as SPEC NDJSON (section 5), one operation after another:
its provider (once), intent, attempts and evidence in time order, and an `expect` line with the
verdict it had when removed. `reconciler replay --check` on that file gives the same verdicts.
Undecided, escalated, human-queue and inside-key-retention operations are never touched
(retention.removable, decided by the ledger in the removing transaction).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any, TextIO

from reconciler.core.domain import (
    Approval,
    Attempt,
    Evidence,
    IntentConflict,
    Match,
    Observation,
    ProviderContract,
    Receipt,
    Resolution,
)
from reconciler.core.errors import ReconcilerError
from reconciler.ledger import Judgement, Ledger

log = logging.getLogger(__name__)

#: Operations removed per transaction: small, so a prune never holds locks for long.
BATCH = 500
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class DurationError(ReconcilerError):
    """A duration is not a number and a unit (30d, 12h, 90m, 45s, 2w)."""


def parse_duration(text: str) -> timedelta:
    found = _DURATION.match(text.strip())
    if not found:
        raise DurationError(f"{text!r} is not a duration: write a number and a unit, "
                            "e.g. 30d, 12h, 90m, 45s, 2w")
    return timedelta(seconds=float(found.group(1)) * _UNIT_S[found.group(2)])


def _at(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def _match(m: Match) -> dict[str, Any]:
    return {"provider_ref": m.provider_ref, **({"request_hash": m.request_hash}
                                               if m.request_hash else {})}


def _fact_line(fact: Attempt | Evidence, judged: Judgement) -> dict[str, Any]:
    op = judged.facts.intent
    match fact:
        case Attempt():
            return {"type": "attempt", "operation_id": op.operation_id, "attempt": fact.number,
                    "idempotency_key": fact.idempotency_key, "request_hash": fact.request_hash,
                    "at": _at(fact.at), "outcome": fact.outcome.value,
                    **({"status": fact.status} if fact.status is not None else {}),
                    **({"receipt": _match(fact.receipt)} if fact.receipt else {})}
        case Receipt():
            return {"type": "receipt", "operation_id": op.operation_id, "at": _at(fact.at),
                    "provider_ref": fact.provider_ref, "request_hash": fact.request_hash,
                    "source": fact.source}
        case Observation():
            return {"type": "probe", "operation_id": op.operation_id, "at": _at(fact.at),
                    "probe": fact.probe, "authority": fact.authority.value,
                    "matches": [_match(m) for m in fact.matches], "error": fact.error}
        case Resolution():
            return {"type": "resolution", "operation_id": op.operation_id, "at": _at(fact.at),
                    "verdict": fact.verdict.value, "actor": fact.actor, "note": fact.note}
        case Approval():
            return {"type": "approval", "operation_id": op.operation_id, "at": _at(fact.at),
                    "actor": fact.actor, "note": fact.note}
        case IntentConflict():
            # Replay records a conflicting repeat of the intent as this same evidence.
            return {**_intent_line(judged), "request_hash": fact.request_hash,
                    "idempotency_key": fact.idempotency_key, "at": _at(fact.at)}
    raise TypeError(f"cannot export {type(fact).__name__}")  # retention keeps those


def _intent_line(judged: Judgement) -> dict[str, Any]:
    i = judged.facts.intent
    return {"type": "intent", "operation_id": i.operation_id, "request_hash": i.request_hash,
            "idempotency_key": i.idempotency_key, "provider": i.provider, "action": i.action,
            "effect": i.effect.value, "at": _at(i.at),
            **({"run_id": i.run_id} if i.run_id else {}),
            **({"tool_call_id": i.tool_call_id} if i.tool_call_id else {})}


def _provider_line(contract: ProviderContract) -> dict[str, Any]:
    return {"type": "provider", "name": contract.name,
            "idempotency_keys": contract.idempotency_keys,
            "key_retention_s": contract.key_retention_s,
            "visibility_lag_s": contract.visibility_lag_s,
            "max_attempts": contract.max_attempts,
            "reconcile_deadline_s": contract.reconcile_deadline_s,
            "compensable": contract.compensable}


def operation_lines(judged: Judgement) -> Iterator[dict[str, Any]]:
    """One removed operation as fixture lines: intent, its facts by time (an attempt before
    evidence of the same instant, each kind in recorded order), the verdict expected."""
    facts = judged.facts
    yield _intent_line(judged)
    timed: list[tuple[datetime, int, int, Attempt | Evidence]] = [
        (a.at, 0, n, a) for n, a in enumerate(facts.attempts)]
    timed += [(e.at, 1, n, e) for n, e in enumerate(facts.evidence)]
    for *_, fact in sorted(timed, key=lambda t: t[:3]):
        yield _fact_line(fact, judged)
    yield {"type": "expect", "operation_id": facts.intent.operation_id,
           "verdict": judged.decision.verdict.value, "at": _at(judged.at)}


def prune(ledger: Ledger, before: datetime, export: TextIO | None = None, *,
          batch: int = BATCH, batches: int | None = None) -> int:
    """Remove the settled operations decided before `before`, `batch` per transaction (at
    most `batches` batches), writing each to `export` before its transaction commits (an
    operation whose removal then fails is in the export all the same: never the other way
    round). How many were removed."""
    providers: set[str] = set()

    def write(judged: Judgement) -> None:
        assert export is not None
        provider = judged.facts.intent.provider
        if provider not in providers:
            providers.add(provider)
            export.write(json.dumps(_provider_line(ledger.store.contract(provider))) + "\n")
        for line in operation_lines(judged):
            export.write(json.dumps(line, separators=(",", ":")) + "\n")

    removed, after, done = 0, None, 0
    while batches is None or done < batches:
        judged, after = ledger.remove_settled(before, after=after, limit=batch,
                                              removing=write if export else None)
        if export is not None:
            export.flush()
        done += 1
        removed += len(judged)
        if after is None:
            break
    return removed


class Retention:
    """The service's retention pass (`[service] retain_settled_days`): each `run` removes at
    most `batches` x `batch` settled operations decided more than `keep` ago, by the ledger's
    clock, without an export. It goes on where the previous run stopped and starts over once
    it reaches the end, so operations retention keeps (inside their key retention, say) never
    hold back those behind them; each run stays short whatever the store holds."""

    def __init__(self, ledger: Ledger, keep: timedelta, *, batch: int = 100,
                 batches: int = 10) -> None:
        self.ledger, self.keep, self.batch, self.batches = ledger, keep, batch, batches
        self._after: str | None = None

    def run(self) -> int:
        """One bounded pass; how many operations it removed."""
        removed = 0
        for _ in range(self.batches):
            judged, self._after = self.ledger.remove_settled(
                self.ledger.clock() - self.keep, after=self._after, limit=self.batch)
            removed += len(judged)
            if self._after is None:
                break
        if removed:
            log.info("retention removed %d settled operation(s)", removed, extra={
                "removed": removed, "retain_settled_days": self.keep / timedelta(days=1)})
        return removed
