"""Runs needing work (the supervisor of `reconciler serve`): a `paused` flag on the run summary
(the run waits for its client's continue request, not for a worker), and an index that finds
live runs without a worker in a range scan:

    ix_runs_needing_work   (state, paused, lease_expires_at, updated_at)
        lease lapsed:      state IN live, paused false, lease_expires_at <= now
        nobody holds it:   state IN live, paused false, lease_expires_at IS NULL,
                           updated_at <= idle_before

Runs paused before this migration are found by their latest event (event kinds are stored in
the clear; only payloads are sealed): a run's pause is the last thing its worker writes.

Revision ID: 0008_runs_needing_work
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_runs_needing_work"
down_revision = "0007"
branch_labels = None
depends_on = None

_PAUSED_NOW = sa.text(
    "UPDATE runs SET paused = :yes WHERE EXISTS (SELECT 1 FROM run_events e "
    "WHERE e.run_id = runs.run_id AND e.seq = runs.seq AND e.kind = 'continue_requested')")


def upgrade() -> None:
    # A plain ADD COLUMN (a constant default, so SQLite need not rebuild the table, which
    # run_events' foreign key would forbid).
    op.add_column("runs", sa.Column("paused", sa.Boolean(), nullable=False, server_default="0"))
    op.get_bind().execute(_PAUSED_NOW, {"yes": True})
    op.create_index("ix_runs_needing_work", "runs",
                    ["state", "paused", "lease_expires_at", "updated_at"])


def downgrade() -> None:
    op.drop_index("ix_runs_needing_work", table_name="runs")
    # SQLite 3.35+ and PostgreSQL drop a column in place (no rebuild: see upgrade).
    op.execute("ALTER TABLE runs DROP COLUMN paused")
