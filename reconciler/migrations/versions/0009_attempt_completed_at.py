"""When the outcome of an attempt opened as `dispatching` reached the sidecar: `completed_at` on
attempts (NULL for attempts recorded whole, and on rows from before). A zero read before it was
read while the request may still have been on its way, and proves nothing.

Revision ID: 0009_attempt_completed_at
Revises: 0008_runs_needing_work
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from reconciler.store.tables import UTCDateTime

revision = "0009_attempt_completed_at"
down_revision = "0008_runs_needing_work"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("completed_at", UTCDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("completed_at")
