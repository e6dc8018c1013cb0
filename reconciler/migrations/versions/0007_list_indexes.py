"""Indexes for the lists an operator pages through (the console, `reconciler ops`, GET
/v1/operations and /v1/runs) at a million stored operations: every filter leads an index whose
next column is the cursor's, so a page is an index range scan of `limit` rows, never a sort of
everything that matches.

    operations ?verdict=        ix_state_verdict_op       (verdict, operation_id)
    operations ?escalated=      ix_state_escalated_op     (escalated, verdict, operation_id)
                                ix_state_action_op        (next_action, operation_id)
    operations ?provider=       ix_intents_provider_op    (provider, operation_id)
    runs ?state=                ix_runs_state_run         (state, run_id)
    runs ?correlation_id=       ix_runs_correlation_run   (correlation_id, run_id)

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

INDEXES = {
    "operation_state": {"ix_state_verdict_op": ["verdict", "operation_id"],
                        "ix_state_escalated_op": ["escalated", "verdict", "operation_id"],
                        "ix_state_action_op": ["next_action", "operation_id"]},
    "intents": {"ix_intents_provider_op": ["provider", "operation_id"]},
    "runs": {"ix_runs_state_run": ["state", "run_id"],
             "ix_runs_correlation_run": ["correlation_id", "run_id"]},
}


def upgrade() -> None:
    for table, indexes in INDEXES.items():
        for name, columns in indexes.items():
            op.create_index(name, table, columns)


def downgrade() -> None:
    for table, indexes in INDEXES.items():
        for name in indexes:
            op.drop_index(name, table_name=table)
