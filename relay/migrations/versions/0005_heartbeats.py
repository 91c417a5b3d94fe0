"""Heartbeats: ``relay_heartbeats (name, beat_at)``, written by the tick (``relay doctor`` reads
how long ago ``celery beat`` last ticked).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from relay.migrations import frozen

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "relay_heartbeats",
        sa.Column("name", sa.String(64), nullable=False),
        frozen.clock_column("beat_at"),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_relay_heartbeats")),
    )


def downgrade() -> None:
    op.drop_table("relay_heartbeats")
