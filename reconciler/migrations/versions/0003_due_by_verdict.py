"""The due-operation scan by verdict first: decided operations (most of a grown store) have no
next probe time, and led `ix_state_due`, so every claim walked past all of them.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("operation_state") as batch:
        batch.drop_index("ix_state_due")
        batch.create_index("ix_state_due", ["verdict", "escalated", "next_probe_at"])


def downgrade() -> None:
    with op.batch_alter_table("operation_state") as batch:
        batch.drop_index("ix_state_due")
        batch.create_index("ix_state_due", ["escalated", "next_probe_at"])
