"""The consumers' inbox: ``relay_inbox (consumer, message_id, received_at)``.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from relay.migrations import frozen

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "relay_inbox",
        sa.Column("consumer", sa.String(255), nullable=False),
        sa.Column("message_id", sa.String(255), nullable=False),
        frozen.clock_column("received_at"),
        sa.PrimaryKeyConstraint("consumer", "message_id", name=op.f("pk_relay_inbox")),
    )
    op.create_index("ix_relay_inbox_received_at", "relay_inbox", ["received_at"])


def downgrade() -> None:
    op.drop_index("ix_relay_inbox_received_at", table_name="relay_inbox")
    op.drop_table("relay_inbox")
