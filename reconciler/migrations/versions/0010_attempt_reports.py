"""Every report of an attempt kept (SPEC section 4, issue 31): a late 2xx after a timeout, or
two reports racing, was refused by the unique (operation_id, number) and lost. Reports of one
attempt now share its number and are told apart by `report` (0 for the first, so a first report
is still one INSERT); unique (operation_id, number, report) keeps two writers from giving one
place to two reports.

With them, the new facts of issue 31: what an intent's request carried (`intents.carries`, NULL
when the worker did not say), a retry reported without the gate's grant
(`attempts.ungranted`), and how long a provider may still apply a request
(`providers.inflight_s`, 60 s unless configured). Existing rows take the defaults: first
reports, granted, carries unsaid, 60 s in flight.

Revision ID: 0010_attempt_reports
Revises: 0009_attempt_completed_at
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_attempt_reports"
down_revision = "0009_attempt_completed_at"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("report", sa.Integer(), nullable=False,
                                   server_default="0"))
        batch.add_column(sa.Column("ungranted", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
        batch.drop_constraint("uq_attempts_op_number", type_="unique")
        batch.create_unique_constraint("uq_attempts_op_number_report",
                                       ["operation_id", "number", "report"])
    with op.batch_alter_table("intents") as batch:
        batch.add_column(sa.Column("carries", sa.String(length=100), nullable=True))
    with op.batch_alter_table("providers") as batch:
        batch.add_column(sa.Column("inflight_s", sa.Float(), nullable=False,
                                   server_default="60"))


def downgrade() -> None:
    """Back to one report per attempt: the reports after the first are dropped (the schema
    before this revision cannot hold them)."""
    op.execute("DELETE FROM attempts WHERE report > 0")
    # SQLite 3.35+ and PostgreSQL drop a column in place: a batch rebuild of `intents` would
    # drop a table the other tables' foreign keys refer to (as in 0008).
    op.execute("ALTER TABLE providers DROP COLUMN inflight_s")
    op.execute("ALTER TABLE intents DROP COLUMN carries")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_constraint("uq_attempts_op_number_report", type_="unique")
        batch.create_unique_constraint("uq_attempts_op_number", ["operation_id", "number"])
        batch.drop_column("ungranted")
        batch.drop_column("report")
