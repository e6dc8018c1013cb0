"""Operations for the benchmarks to work on, and the stores they live in.

Small numbers go through the ledger, as a worker's calls would. Large numbers (10,000 due
operations, 1,000,000 stored ones) are bulk-inserted with SQL into the store's own tables, in
the rows the ledger would leave: that takes seconds instead of the hours a million ledger calls
would, and the benchmarks measure what happens to them afterwards, not how they got there.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, Table, create_engine, func, insert, select
from sqlalchemy.engine import make_url

from bench.harness import BenchError
from reconciler.core.domain import (
    Attempt,
    Authority,
    Effect,
    Facts,
    Intent,
    Match,
    Observation,
    Outcome,
    ProviderContract,
    Verdict,
)
from reconciler.core.ports import FIRST_DECISION
from reconciler.core.schedule import due_after
from reconciler.core.summary import summarize
from reconciler.core.verdicts import evaluate
from reconciler.ledger import Ledger, utcnow
from reconciler.store.rows import evidence_values, intent_values, state_values
from reconciler.store.tables import AttemptRow, EvidenceRow, IntentRow, StateRow

PROVIDER = "pay"
REQUEST_HASH = "sha256:" + "5e" * 32
#: Keys, a retry budget and an hour to reconcile: a zero opens a retry, a receipt settles it. A
#: timed-out request may be applied for a second after its dispatch (the settle time).
CONTRACT = ProviderContract(name=PROVIDER, idempotency_keys=True, max_attempts=3,
                            reconcile_deadline_s=3600, visibility_lag_s=5, inflight_s=1)
CHUNK = 10_000


def key_of(operation_id: str) -> str:
    return f"key-{operation_id}"


def intent_of(operation_id: str, at: datetime) -> Intent:
    return Intent(operation_id, REQUEST_HASH, key_of(operation_id), PROVIDER, "charge",
                  Effect.IDEMPOTENT_WRITE, at)


def retryable(ledger: Ledger, operation_id: str) -> Intent:
    """verified_not_applied with a retry allowed: attempt 1 timed out, then an authoritative
    read, strictly after that dispatch had settled, found nothing."""
    now = utcnow()
    intent = intent_of(operation_id, now - timedelta(seconds=4))
    ledger.store.record_intent(intent)
    ledger.store.record_attempt(Attempt(operation_id, 1, intent.idempotency_key,
                                        REQUEST_HASH, now - timedelta(seconds=3),
                                        Outcome.TIMEOUT))
    judgement = ledger.record_evidence(Observation(operation_id, now - timedelta(seconds=1),
                                                   "bench.lookup", Authority.AUTHORITATIVE))
    if not judgement.decision.retry_allowed:
        raise BenchError(f"{operation_id} was prepared to allow a retry, and does not: "
                           f"{judgement.decision}")
    return intent


class Seeder:
    """Bulk inserts of operations in two states, as rows of the store's tables:

    - due: attempt 1 timed out just past the visibility window and nothing else is known:
      indeterminate, to be probed now (what the sweep picks up). Past the window, the first
      read is also the confirmation a verified_applied owes (SPEC section 4), so every due
      operation is read exactly once, which the benchmarks count;
    - settled: a 200 with a bound receipt an hour ago, and an authoritative read since that
      finds the one charge (its confirmation): verified_applied with nothing due, the state
      most stored operations are in.
    """

    def __init__(self, engine: Engine, at: datetime | None = None) -> None:
        self.engine = engine
        self.at = at or utcnow()

    def analyze(self) -> None:
        """Bring the planner's statistics up to date, as autovacuum (or a long-running store)
        would have: right after a bulk seed PostgreSQL plans from an empty table's, and a
        ?provider= page of 100,000 operations read and sorted every match (158 ms, 2 ms after
        ANALYZE)."""
        with self.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")

    def due(self, ids: Sequence[str]) -> None:
        # Settled and past the visibility window: the first read decides.
        attempt_at = self.at - timedelta(
            seconds=CONTRACT.inflight_s + CONTRACT.visibility_lag_s + 1)
        intent_at = attempt_at - timedelta(seconds=1)
        self._insert(ids, intent_at, lambda op: (
            Attempt(op, 1, key_of(op), REQUEST_HASH, attempt_at, Outcome.TIMEOUT), None))

    def settled(self, ids: Sequence[str]) -> None:
        intent_at, attempt_at = self.at - timedelta(hours=1, seconds=2), self.at - timedelta(
            hours=1, seconds=1)
        read_at = self.at - timedelta(seconds=1)
        self._insert(ids, intent_at, lambda op: (
            Attempt(op, 1, key_of(op), REQUEST_HASH, attempt_at, Outcome.RESPONSE, 200,
                    Match(f"ch_{op}", REQUEST_HASH)),
            Observation(op, read_at, "lookup", Authority.AUTHORITATIVE,
                        (Match(f"ch_{op}", REQUEST_HASH),))))

    def undispatched(self, ids: Sequence[str]) -> None:
        """Intents recorded an hour ago and never dispatched (no attempt): indeterminate, with
        nothing due, as a store keeps an intent whose worker died before sending."""
        intent_at = self.at - timedelta(hours=1)
        verdict, action = FIRST_DECISION
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start:start + CHUNK]
            with self.engine.begin() as conn:
                conn.execute(insert(table_of(IntentRow)), [intent_values(
                    intent_of(op, intent_at)) for op in chunk])
                conn.execute(insert(table_of(StateRow)), [
                    {**state_values(intent_of(op, intent_at), verdict, action),
                     "due_at": None} for op in chunk])

    def _insert(self, ids: Sequence[str], intent_at: datetime, facts_of: Any) -> None:
        # The cached verdict is what the engine decides for such an operation, so that
        # reading it back changes nothing (and writes nothing), as for a real one.
        sample = ids[0] if ids else "sample"
        attempt, receipt = facts_of(sample)
        decision = evaluate(Facts(intent_of(sample, intent_at), (attempt,),
                                  (receipt,) if receipt else ()), CONTRACT, self.at)
        if receipt is not None and decision.verdict is not Verdict.VERIFIED_APPLIED:
            raise BenchError(f"a settled operation should be verified_applied: {decision}")
        # As a real store would have it: due now if undecided, else its confirmation round.
        due_at = due_after(summarize(Facts(intent_of(sample, intent_at), (attempt,),
                                           (receipt,) if receipt else ())), decision, CONTRACT)
        if receipt is not None and due_at is not None:
            raise BenchError(f"a settled operation should have nothing due: {due_at}")
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start:start + CHUNK]
            intents, states, attempts, evidence = [], [], [], []
            for op in chunk:
                attempt, receipt = facts_of(op)
                intents.append({"operation_id": op, "request_hash": REQUEST_HASH,
                                "idempotency_key": key_of(op), "provider": PROVIDER,
                                "action": "charge", "effect": Effect.IDEMPOTENT_WRITE.value,
                                "at": intent_at, "correlation": "{}"})
                states.append({"operation_id": op, "verdict": decision.verdict.value,
                               "next_action": decision.next_action, "escalated": False,
                               "probe_count": 0, "updated_at": self.at, "due_at": due_at})
                attempts.append({"operation_id": op, "number": 1, "idempotency_key": key_of(op),
                                 "request_hash": REQUEST_HASH, "at": attempt.at,
                                 "outcome": attempt.outcome.value, "status": attempt.status,
                                 "receipt_ref": attempt.receipt.provider_ref
                                 if attempt.receipt else None,
                                 "receipt_hash": REQUEST_HASH if attempt.receipt else None})
                if receipt is not None:
                    evidence.append(evidence_values(receipt))
            with self.engine.begin() as conn:
                for table, rows in ((table_of(IntentRow), intents), (table_of(StateRow), states),
                                    (table_of(AttemptRow), attempts),
                                    (table_of(EvidenceRow), evidence)):
                    if rows:
                        conn.execute(insert(table), rows)


def table_of(model: Any) -> Table:
    """The Core table of a SQLModel table class."""
    table: Table = model.__table__
    return table


def probe_config(sandbox_url: str) -> dict[str, Any]:
    """The provider's contract and its one probe, an authoritative lookup of the sandbox's own
    key record (an `http_json` probe: Stripe has no such endpoint), as a configuration file
    would hold them."""
    return {"providers": {PROVIDER: {
        "idempotency_keys": CONTRACT.idempotency_keys,
        "max_attempts": CONTRACT.max_attempts,
        "reconcile_deadline_s": CONTRACT.reconcile_deadline_s,
        "visibility_lag_s": CONTRACT.visibility_lag_s,
        "inflight_s": CONTRACT.inflight_s,
        "probes": [{"use": "http_json", "name": "sandbox.key_record", "actions": ["charge"],
                    "base_url": sandbox_url + "/pay",
                    "path": "/_sandbox/idempotency_keys/{idempotency_key}", "item": "",
                    "ref": "charge_id", "hash": "request_hash", "emit": "receipt",
                    "where": {"key": "{idempotency_key}"}, "not_found": "zero",
                    "not_found_where": {"error.code": "resource_missing"},
                    "authority": "authoritative", "tries": 2, "backoff_s": 0.05,
                    "timeout_s": 5.0, "deadline_s": 10.0}]}}}


def toml_config(sandbox_url: str, service: dict[str, object]) -> str:
    """`probe_config` and a [service] table as TOML, for `reconciler serve --config`."""
    provider = probe_config(sandbox_url)["providers"][PROVIDER]
    probe = provider.pop("probes")[0]

    def value(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, dict):
            return "{ " + ", ".join(f'"{k}" = {value(x)}' for k, x in v.items()) + " }"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return f'"{v}"' if isinstance(v, str) else str(v)

    lines = ["[service]", *(f"{k} = {value(v)}" for k, v in service.items()), "",
             f"[providers.{PROVIDER}]", *(f"{k} = {value(v)}" for k, v in provider.items()),
             "", f"[[providers.{PROVIDER}.probes]]",
             *(f"{k} = {value(v)}" for k, v in probe.items())]
    return "\n".join(lines) + "\n"


def decided_after(engine: Engine, since: datetime) -> list[float]:
    """Seconds from `since` to the verdict of every operation decided since then: the cached
    verdict's `updated_at` is when it last changed."""
    state = table_of(StateRow)
    query = select(state.c.updated_at).where(state.c.updated_at >= since,
                                             state.c.verdict != Verdict.INDETERMINATE.value)
    with engine.connect() as conn:
        return [(at - since).total_seconds() for (at,) in conn.execute(query)]


def verdict_counts(engine: Engine) -> dict[str, int]:
    """How many operations have each cached verdict."""
    state = table_of(StateRow)
    query = select(state.c.verdict, func.count()).group_by(state.c.verdict)
    with engine.connect() as conn:
        return {str(verdict): int(n) for verdict, n in conn.execute(query)}


def ids(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(count)]


@contextmanager
def pg_schema(url: str) -> Iterator[str]:
    """A URL whose connections live in a fresh schema of the PostgreSQL at `url` (selected
    through search_path), dropped afterwards."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(url)
    try:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        try:
            yield in_schema(url, schema)
        finally:
            with admin.begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
    finally:
        admin.dispose()


def in_schema(url: str, schema: str) -> str:
    """The PostgreSQL URL `url` with its connections in `schema` (selected through
    search_path)."""
    return make_url(url).update_query_dict(
        {"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
