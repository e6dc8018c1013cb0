"""Initial schema: intents, attempts, evidence, providers, operation state.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from reconciler.store.tables import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "intents",
        sa.Column("operation_id", sa.String(length=200), nullable=False),
        sa.Column("request_hash", sa.String(length=80), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("provider", sa.String(length=100), nullable=False),
        sa.Column("action", sa.String(length=100), nullable=False),
        sa.Column("effect", sa.String(length=20), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=True),
        sa.Column("tool_call_id", sa.String(length=200), nullable=True),
        sa.Column("correlation", sa.String(length=2000), nullable=False),
        sa.PrimaryKeyConstraint("operation_id"),
    )
    with op.batch_alter_table("intents", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_intents_provider"), ["provider"], unique=False)
        batch_op.create_index("ix_intents_run_tool_call", ["run_id", "tool_call_id"], unique=False)

    op.create_table(
        "providers",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("idempotency_keys", sa.Boolean(), nullable=False),
        sa.Column("key_retention_s", sa.Float(), nullable=False),
        sa.Column("visibility_lag_s", sa.Float(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("reconcile_deadline_s", sa.Float(), nullable=False),
        sa.Column("compensable", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("operation_id", sa.String(length=200), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("request_hash", sa.String(length=80), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("receipt_ref", sa.String(length=255), nullable=True),
        sa.Column("receipt_hash", sa.String(length=80), nullable=True),
        sa.ForeignKeyConstraint(
            ["operation_id"],
            ["intents.operation_id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("operation_id", "number", name="uq_attempts_op_number"),
    )
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_attempts_operation_id"), ["operation_id"], unique=False
        )

    op.create_table(
        "evidence",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("operation_id", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("source", sa.String(length=100), nullable=True),
        sa.Column("authority", sa.String(length=20), nullable=True),
        sa.Column("provider_ref", sa.String(length=255), nullable=True),
        sa.Column("request_hash", sa.String(length=80), nullable=True),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("matches", sa.String(), nullable=True),
        sa.Column("error", sa.String(length=500), nullable=True),
        sa.Column("verdict", sa.String(length=30), nullable=True),
        sa.Column("actor", sa.String(length=200), nullable=True),
        sa.Column("note", sa.String(length=2000), nullable=True),
        sa.ForeignKeyConstraint(
            ["operation_id"],
            ["intents.operation_id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("evidence", schema=None) as batch_op:
        batch_op.create_index("ix_evidence_op_id", ["operation_id", "id"], unique=False)

    op.create_table(
        "operation_state",
        sa.Column("operation_id", sa.String(length=200), nullable=False),
        sa.Column("verdict", sa.String(length=30), nullable=False),
        sa.Column("next_action", sa.String(length=40), nullable=False),
        sa.Column("escalated", sa.Boolean(), nullable=False),
        sa.Column("probe_count", sa.Integer(), nullable=False),
        sa.Column("next_probe_at", UTCDateTime(), nullable=True),
        sa.Column("lease_holder", sa.String(length=200), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("retry_holder", sa.String(length=200), nullable=True),
        sa.Column("retry_lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["operation_id"],
            ["intents.operation_id"],
        ),
        sa.PrimaryKeyConstraint("operation_id"),
    )
    with op.batch_alter_table("operation_state", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_operation_state_verdict"), ["verdict"], unique=False)
        batch_op.create_index("ix_state_due", ["escalated", "next_probe_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("operation_state", schema=None) as batch_op:
        batch_op.drop_index("ix_state_due")
        batch_op.drop_index(batch_op.f("ix_operation_state_verdict"))

    op.drop_table("operation_state")
    with op.batch_alter_table("evidence", schema=None) as batch_op:
        batch_op.drop_index("ix_evidence_op_id")

    op.drop_table("evidence")
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_attempts_operation_id"))

    op.drop_table("attempts")
    op.drop_table("providers")
    with op.batch_alter_table("intents", schema=None) as batch_op:
        batch_op.drop_index("ix_intents_run_tool_call")
        batch_op.drop_index(batch_op.f("ix_intents_provider"))

    op.drop_table("intents")
