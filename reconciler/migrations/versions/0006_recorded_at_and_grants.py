"""The sidecar's clock on every record, and the attempt a retry grant allows (SPEC section 6,
"Trust"): `recorded_at` on attempts and evidence beside the time the client claims (NULL on
rows from before: their `at` was the only time known), and `retry_attempt` on the state row.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from reconciler.store.tables import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("attempts", "evidence"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("recorded_at", UTCDateTime(), nullable=True))
    with op.batch_alter_table("operation_state") as batch:
        batch.add_column(sa.Column("retry_attempt", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("operation_state") as batch:
        batch.drop_column("retry_attempt")
    for table in ("evidence", "attempts"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("recorded_at")
