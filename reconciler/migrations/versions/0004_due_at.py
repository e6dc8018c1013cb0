"""Due rounds by their own time: `due_at` replaces `next_probe_at`, NULL when no round is due.

The due scan used to find undecided, unescalated, dispatched operations whose probe time had come
by joining intents and looking for an attempt per row: with a million stored operations it walked
them all. Now an operation carries the time its next round is due (a first dispatch makes it due,
a round schedules the next, a settled verdict clears it or schedules its one confirmation round),
and a partial index holds only the due ones.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from reconciler.store.tables import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_DUE = sa.text("due_at IS NOT NULL")


def upgrade() -> None:
    with op.batch_alter_table("operation_state") as batch:
        batch.add_column(sa.Column("due_at", UTCDateTime(), nullable=True))
    op.execute(
        "UPDATE operation_state SET due_at = COALESCE(next_probe_at, updated_at) "
        "WHERE verdict = 'indeterminate' AND escalated = false AND EXISTS "
        "(SELECT 1 FROM attempts WHERE attempts.operation_id = operation_state.operation_id)")
    with op.batch_alter_table("operation_state") as batch:
        batch.drop_index("ix_state_due")
        batch.drop_column("next_probe_at")
    op.create_index("ix_state_due", "operation_state", ["due_at"],
                    sqlite_where=_DUE, postgresql_where=_DUE)


def downgrade() -> None:
    op.drop_index("ix_state_due", table_name="operation_state")
    with op.batch_alter_table("operation_state") as batch:
        batch.add_column(sa.Column("next_probe_at", UTCDateTime(), nullable=True))
    op.execute("UPDATE operation_state SET next_probe_at = due_at")
    with op.batch_alter_table("operation_state") as batch:
        batch.drop_column("due_at")
        batch.create_index("ix_state_due", ["verdict", "escalated", "next_probe_at"])
