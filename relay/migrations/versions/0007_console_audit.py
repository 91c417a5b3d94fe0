"""The web console: ``relay_audit`` (who did what, the filter, how many rows, when) and
``ix_outbox_sent_at`` (the last hour's throughput and lag charts read that hour only).

The index is built first, CONCURRENTLY on PostgreSQL (outside the revision's transaction) and
in place without a lock on MariaDB (:func:`relay.migrations.online.create_index`): writers go
on meanwhile. An index of that name built beforehand is kept.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from relay.migrations import frozen, online

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # First: on MariaDB DDL commits as it goes, and a retry after a lock timeout on the outbox
    # must not find the new table made already.
    online.create_index("ix_outbox_sent_at", ["sent_at"])
    op.create_table(
        "relay_audit",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        frozen.clock_column("at"),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("via", sa.String(16), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("selector", sa.JSON(), nullable=False),
        sa.Column("matched", sa.Integer(), nullable=False),
        sa.Column("changed", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_relay_audit")),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table("relay_audit")
    online.drop_index("ix_outbox_sent_at")
