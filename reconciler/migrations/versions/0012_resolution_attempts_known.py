"""A resolution remembers how many attempt reports were recorded before it (SPEC section 4,
issue 31): an attempt reported after a human's decision reopens it however it is dated, and
attempts and evidence are kept in separate tables, so recorded order needs the count.
A resolution recorded before this revision has none: it is weighed by dispatch time alone, as
it was.

Revision ID: 0012_resolution_attempts_known
Revises: 0011_grant_token
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_resolution_attempts_known"
down_revision = "0011_grant_token"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("evidence") as batch:
        batch.add_column(sa.Column("attempts_known", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evidence") as batch:
        batch.drop_column("attempts_known")
