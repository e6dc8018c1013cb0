"""A retry grant bound to the send (SPEC rule 6, issue 31): `operation_state.retry_grant`, the
SHA-256 of the grant's token (never the token itself). Opening the granted attempt needs the
token, so a holder name alone, an expired grant or another caller's opens nothing. A lease
granted before this revision has no hash: it runs out within its TTL, and asking again binds
the new one.

Revision ID: 0011_grant_token
Revises: 0010_attempt_reports
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_grant_token"
down_revision = "0010_attempt_reports"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("operation_state") as batch:
        batch.add_column(sa.Column("retry_grant", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("operation_state") as batch:
        batch.drop_column("retry_grant")
