"""The state row counts the facts recorded about its operation (issue 31, item 9): how many
attempt reports were inserted, how many open reports were completed, how many pieces of
evidence were appended. Every write of a fact bumps its count in the same transaction, so a
decision that kept the operation's summary from an earlier one (store/folds.py) reads only
what the counts say is new, and tells, by counting, when it cannot (then it reads it all).
Attempt reports are read from an id onwards: the index on the operation alone becomes one on
(operation, id), as evidence has had since 0001.

Existing rows are counted here; completions before this revision are not needed (only the
change since a decision is ever compared).

Revision ID: 0013_fact_counts
Revises: 0012_resolution_attempts_known
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_fact_counts"
down_revision = "0012_resolution_attempts_known"
branch_labels = None
depends_on = None

_COUNTS = ("attempt_rows", "completions", "evidence_rows")


def upgrade() -> None:
    with op.batch_alter_table("operation_state") as batch:
        for name in _COUNTS:
            batch.add_column(sa.Column(name, sa.Integer(), nullable=False,
                                       server_default=sa.text("0")))
    op.execute("UPDATE operation_state SET "
               "attempt_rows = (SELECT count(*) FROM attempts a "
               "WHERE a.operation_id = operation_state.operation_id), "
               "evidence_rows = (SELECT count(*) FROM evidence e "
               "WHERE e.operation_id = operation_state.operation_id)")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_index("ix_attempts_operation_id")
        batch.create_index("ix_attempts_op_id", ["operation_id", "id"])


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_index("ix_attempts_op_id")
        batch.create_index("ix_attempts_operation_id", ["operation_id"])
    with op.batch_alter_table("operation_state") as batch:
        for name in _COUNTS:
            batch.drop_column(name)
