"""Retention that keeps up: ``relay_purger`` (the purge's lease and its record of rows left
behind) and ``outbox_sent_counts`` (sent events per minute, for a table whose rows are deleted
at send). Independent of 0012: the lead re-chains it at merge.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from relay.migrations import frozen

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "relay_purger",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("holder", sa.String(255), nullable=True),
        sa.Column("expires_at", frozen.timestamp(), nullable=True),
        sa.Column("ran_at", frozen.timestamp(), nullable=True),
        sa.Column("behind_rows", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("prev_behind_rows", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_relay_purger")),
    )
    # The row exists from the start, so taking the lease is one UPDATE that either wins or not.
    op.execute("INSERT INTO relay_purger (name) VALUES ('sent')")
    op.create_table(
        "outbox_sent_counts",
        sa.Column("minute", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("shard", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("sent", sa.BigInteger(), nullable=False),
        sa.Column("lag_sum", sa.Float(), nullable=False),
        sa.Column("lag_max", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("minute", "shard", name=op.f("pk_outbox_sent_counts")),
    )


def downgrade() -> None:
    op.drop_table("outbox_sent_counts")
    op.drop_table("relay_purger")
