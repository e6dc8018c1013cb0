"""The receipt store's tables. Intents, attempts and evidence are append-only; only the
per-operation state row (cached verdict, schedule, leases) is ever updated.

No column holds a secret, a message body or full arguments: hashes, identities, references.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Index, TypeDecorator, UniqueConstraint
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
    __table_args__ = (Index("ix_intents_run_tool_call", "run_id", "tool_call_id"),)

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


class AttemptRow(SQLModel, table=True):
    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("operation_id", "number", name="uq_attempts_op_number"),)

    id: int | None = Field(default=None, primary_key=True)
    operation_id: str = Field(foreign_key="intents.operation_id", max_length=200, index=True)
    number: int
    idempotency_key: str | None = Field(default=None, max_length=255)
    request_hash: str = Field(max_length=80)
    at: datetime = _at(nullable=False)
    outcome: str = Field(max_length=20)
    status: int | None = None
    receipt_ref: str | None = Field(default=None, max_length=255)
    receipt_hash: str | None = Field(default=None, max_length=80)


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


class ProviderRow(SQLModel, table=True):
    __tablename__ = "providers"

    name: str = Field(primary_key=True, max_length=100)
    idempotency_keys: bool
    key_retention_s: float
    visibility_lag_s: float
    max_attempts: int
    reconcile_deadline_s: float
    compensable: bool


class StateRow(SQLModel, table=True):
    """Mutable bookkeeping per operation: the cached verdict, the probe schedule, the leases."""

    __tablename__ = "operation_state"
    __table_args__ = (Index("ix_state_due", "escalated", "next_probe_at"),)

    operation_id: str = Field(foreign_key="intents.operation_id", primary_key=True,
                              max_length=200)
    verdict: str = Field(max_length=30, index=True)
    next_action: str = Field(max_length=40)
    escalated: bool = False
    probe_count: int = 0
    next_probe_at: datetime | None = _at(nullable=True)
    lease_holder: str | None = Field(default=None, max_length=200)
    lease_expires_at: datetime | None = _at(nullable=True)
    retry_holder: str | None = Field(default=None, max_length=200)
    retry_lease_expires_at: datetime | None = _at(nullable=True)
    updated_at: datetime = _at(nullable=False)
