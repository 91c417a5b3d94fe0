"""The web console: ``relay_audit`` (who did what, the filter, how many rows, when) and
``ix_outbox_sent_at`` (the last hour's throughput and lag charts read that hour only).

On a large PostgreSQL outbox, build the index beforehand without blocking writers
(``CREATE INDEX CONCURRENTLY ix_outbox_sent_at ON outbox (sent_at)``): this revision then finds
it and does nothing more for it.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from relay.migrations import frozen

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    dialect = op.get_context().dialect.name
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
    if dialect in frozen.MYSQL:
        op.create_index("ix_outbox_sent_at", "outbox", ["sent_at"])
    else:
        op.create_index("ix_outbox_sent_at", "outbox", ["sent_at"], if_not_exists=True)


def downgrade() -> None:
    op.drop_index("ix_outbox_sent_at", table_name="outbox")
    op.drop_table("relay_audit")
