"""The receipt store's tables. Intents, attempts and evidence are append-only; only the
per-operation state row (cached verdict, schedule, leases) is ever updated.

No column holds a secret, a message body or full arguments: hashes, identities, references.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Index, TypeDecorator, UniqueConstraint, text
from sqlalchemy.engine import Dialect
from sqlmodel import Column, Field, SQLModel


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in and out, whatever the backend keeps (SQLite keeps naive text)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: the store keeps UTC-aware times only")
        return value.astimezone(UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if not isinstance(value, datetime):
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _at(**kw: Any) -> Any:
    return Field(sa_column=Column(UTCDateTime(), **kw))


class IntentRow(SQLModel, table=True):
    __tablename__ = "intents"
    __table_args__ = (Index("ix_intents_run_tool_call", "run_id", "tool_call_id"),
                      Index("ix_intents_provider_op", "provider", "operation_id"))

    operation_id: str = Field(primary_key=True, max_length=200)
    request_hash: str = Field(max_length=80)
    idempotency_key: str | None = Field(default=None, max_length=255)
    provider: str = Field(max_length=100, index=True)
    action: str = Field(max_length=100)
    effect: str = Field(max_length=20)
    at: datetime = _at(nullable=False)
    run_id: str | None = Field(default=None, max_length=200)
    tool_call_id: str | None = Field(default=None, max_length=200)
    correlation: str = Field(default="{}", max_length=2000)
    #: What the request carried to the provider (SPEC section 3): its `Carried` values, sorted
    #: and comma-joined ("" for nothing); NULL when the worker did not say.
    carries: str | None = Field(default=None, max_length=100)


class AttemptRow(SQLModel, table=True):
    """One row per report of an attempt (SPEC section 4: an outcome may be reported more than
    once, and every report is kept); the reports of one attempt share its `number`. `id` is the
    recorded order. A first report is `report` 0, so recording one is a single INSERT; one
    refused there is another report of a recorded attempt, numbered on from the highest
    (store/attempts.py)."""

    __tablename__ = "attempts"
    # An operation's reports are read from an id onwards (store/folds.py): (operation, id).
    __table_args__ = (UniqueConstraint("operation_id", "number", "report",
                                       name="uq_attempts_op_number_report"),
                      Index("ix_attempts_op_id", "operation_id", "id"))

    id: int | None = Field(default=None, primary_key=True)
    operation_id: str = Field(foreign_key="intents.operation_id", max_length=200)
    number: int
    #: The report's place among its attempt's reports: 0 for the first.
    report: int = 0
    idempotency_key: str | None = Field(default=None, max_length=255)
    request_hash: str = Field(max_length=80)
    at: datetime = _at(nullable=False)
    outcome: str = Field(max_length=20)
    status: int | None = None
    receipt_ref: str | None = Field(default=None, max_length=255)
    receipt_hash: str | None = Field(default=None, max_length=80)
    #: The sidecar's clock when it recorded the attempt; `at` is the time the client claims.
    recorded_at: datetime | None = _at(nullable=True)
    #: The sidecar's clock when the outcome of an attempt opened as dispatching came in.
    completed_at: datetime | None = _at(nullable=True)
    #: A retry reported as sent without the retry gate's live grant (SPEC rule 6).
    ungranted: bool = False


class EvidenceRow(SQLModel, table=True):
    """One row per receipt, observation, resolution, approval, conflict or refused retry.

    `kind` says which; the columns a kind does not use stay NULL. `id` is the recorded order.
    """

    __tablename__ = "evidence"
    __table_args__ = (Index("ix_evidence_op_id", "operation_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    operation_id: str = Field(foreign_key="intents.operation_id", max_length=200)
    kind: str = Field(max_length=20)
    at: datetime = _at(nullable=False)
    source: str | None = Field(default=None, max_length=100)
    authority: str | None = Field(default=None, max_length=20)
    provider_ref: str | None = Field(default=None, max_length=255)
    request_hash: str | None = Field(default=None, max_length=80)
    idempotency_key: str | None = Field(default=None, max_length=255)
    matches: str | None = None
    error: str | None = Field(default=None, max_length=500)
    verdict: str | None = Field(default=None, max_length=30)
    actor: str | None = Field(default=None, max_length=200)
    note: str | None = Field(default=None, max_length=2000)
    recorded_at: datetime | None = _at(nullable=True)
    #: A resolution's count of the attempt reports recorded before it (migration 0012).
    attempts_known: int | None = None


class ProviderRow(SQLModel, table=True):
    __tablename__ = "providers"

    name: str = Field(primary_key=True, max_length=100)
    idempotency_keys: bool
    key_retention_s: float
    visibility_lag_s: float
    max_attempts: int
    reconcile_deadline_s: float
    compensable: bool
    #: How long after a dispatch the provider may still apply a request (SPEC section 4).
    inflight_s: float = 60.0


class StateRow(SQLModel, table=True):
    """Mutable bookkeeping per operation: the cached verdict, the probe schedule, the leases."""

    __tablename__ = "operation_state"
    # Only the due rows are indexed: a claim reads them and nothing else, however many
    # operations are settled or never dispatched. The lists' filters lead an index ending in
    # the cursor column (migration 0007).
    __table_args__ = (Index("ix_state_due", "due_at", sqlite_where=text("due_at IS NOT NULL"),
                            postgresql_where=text("due_at IS NOT NULL")),
                      Index("ix_state_verdict_op", "verdict", "operation_id"),
                      Index("ix_state_escalated_op", "escalated", "verdict", "operation_id"),
                      Index("ix_state_action_op", "next_action", "operation_id"))

    operation_id: str = Field(foreign_key="intents.operation_id", primary_key=True,
                              max_length=200)
    verdict: str = Field(max_length=30, index=True)
    next_action: str = Field(max_length=40)
    escalated: bool = False
    probe_count: int = 0
    #: When the next probe round is due; None when none is (settled, escalated, not dispatched).
    due_at: datetime | None = _at(nullable=True)
    lease_holder: str | None = Field(default=None, max_length=200)
    lease_expires_at: datetime | None = _at(nullable=True)
    retry_holder: str | None = Field(default=None, max_length=200)
    retry_lease_expires_at: datetime | None = _at(nullable=True)
    #: The attempt number the retry grant allows: the holder records it, nobody else.
    retry_attempt: int | None = None
    #: The SHA-256 of the retry grant's token (never the token): opening needs the token.
    retry_grant: str | None = Field(default=None, max_length=64)
    updated_at: datetime = _at(nullable=False)
    # The facts recorded about the operation, counted by every write of one in its own
    # transaction (migration 0013): a decision that kept the summary of an earlier one reads
    # only what is new, and knows by these counts whether it read all of it (store/folds.py).
    #: Attempt reports inserted.
    attempt_rows: int = Field(default=0, sa_column_kwargs={"server_default": text("0")})
    #: Open (`dispatching`) reports completed in place.
    completions: int = Field(default=0, sa_column_kwargs={"server_default": text("0")})
    #: Pieces of evidence appended.
    evidence_rows: int = Field(default=0, sa_column_kwargs={"server_default": text("0")})


class RunRow(SQLModel, table=True):
    """An agent run's summary, kept equal to the projection of its events (runs.events)."""

    __tablename__ = "runs"
    __table_args__ = (Index("ix_runs_state_run", "state", "run_id"),
                      Index("ix_runs_correlation_run", "correlation_id", "run_id"),
                      Index("ix_runs_needing_work", "state", "paused", "lease_expires_at",
                            "updated_at"))

    run_id: str = Field(primary_key=True, max_length=200)
    state: str = Field(max_length=20, index=True)
    seq: int
    turn: int = 0
    correlation_id: str | None = Field(default=None, max_length=200)
    stop_reason: str | None = Field(default=None, max_length=60)
    error_code: str | None = Field(default=None, max_length=60)
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    created_at: datetime = _at(nullable=False)
    updated_at: datetime = _at(nullable=False)
    #: The worker driving the run, until its lease expires (see SqlJournal.claim).
    holder: str | None = Field(default=None, max_length=200)
    lease_expires_at: datetime | None = _at(nullable=True)
    #: Paused for a continue request: the run waits for its client, not for a worker.
    paused: bool = False


class RunEventRow(SQLModel, table=True):
    """One event of a run; append-only. (run_id, seq) is unique, so two writers that both
    read seq n cannot both append n+1: the loser reloads and decides again."""

    __tablename__ = "run_events"
    __table_args__ = (UniqueConstraint("run_id", "seq", name="uq_run_events_run_seq"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="runs.run_id", max_length=200)
    seq: int
    kind: str = Field(max_length=40)
    at: datetime = _at(nullable=False)
    data: str


class ToolResultRow(SQLModel, table=True):
    """A tool call's result, recorded once: the key is (run, turn, tool call)."""

    __tablename__ = "run_tool_results"

    run_id: str = Field(foreign_key="runs.run_id", primary_key=True, max_length=200)
    turn: int = Field(primary_key=True)
    tool_call_id: str = Field(primary_key=True, max_length=200)
    is_error: bool
    source: str = Field(max_length=20)
    at: datetime = _at(nullable=False)


class WebhookDeliveryRow(SQLModel, table=True):
    """A provider delivery accepted once: its id, provider and arrival, never its body. A
    delivery id seen again is a replay (service/webhooks)."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_provider_at", "provider", "received_at"),)

    provider: str = Field(primary_key=True, max_length=120)
    delivery_id: str = Field(primary_key=True, max_length=255)
    received_at: datetime = _at(nullable=False)
