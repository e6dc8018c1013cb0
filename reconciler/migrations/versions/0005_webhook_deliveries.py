"""Webhook deliveries: the ids of accepted provider deliveries, so a replay is refused.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from reconciler.store.tables import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhook_deliveries",
        sa.Column("provider", sa.String(length=120), nullable=False),
        sa.Column("delivery_id", sa.String(length=255), nullable=False),
        sa.Column("received_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("provider", "delivery_id"),
    )
    op.create_index("ix_webhook_deliveries_provider_at", "webhook_deliveries",
                    ["provider", "received_at"])


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_provider_at", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
