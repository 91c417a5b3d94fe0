"""Create the outbox table.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from relay.migrations import frozen

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

UNFINISHED = "status IN ('pending', 'processing')"
ORDERED_UNSENT = "ordering_key IS NOT NULL AND status <> 'sent'"


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    ts = frozen.timestamp()
    op.create_table(
        "outbox",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("event_type", sa.String(255), nullable=False),
        sa.Column("payload", json, nullable=False),
        sa.Column("headers", json, nullable=True),
        sa.Column("ordering_key", sa.String(255), nullable=True),
        sa.Column("status", sa.String(16), nullable=False, server_default="pending"),
        sa.Column("attempt", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("next_retry_at", ts, nullable=True),
        sa.Column("locked_by", sa.String(255), nullable=True),
        sa.Column("locked_until", ts, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        frozen.clock_column("created_at"),
        frozen.clock_column("updated_at"),
        sa.Column("sent_at", ts, nullable=True),
        sa.CheckConstraint(
            "status IN ('pending', 'processing', 'sent', 'failed')", name=op.f("ck_outbox_status")
        ),
        sa.CheckConstraint("attempt >= 0", name=op.f("ck_outbox_attempt")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
        sqlite_autoincrement=True,
    )
    if dialect in frozen.MYSQL:
        # No partial indexes: the claim reads one status at a time in id order.
        op.create_index("ix_outbox_status_id", "outbox", ["status", "id"])
    else:
        op.create_index(
            "ix_outbox_claimable",
            "outbox",
            ["id"],
            postgresql_where=sa.text(UNFINISHED),
            sqlite_where=sa.text(UNFINISHED),
        )
    op.create_index(
        "ix_outbox_ordering",
        "outbox",
        ["ordering_key", "id"],
        postgresql_where=sa.text(ORDERED_UNSENT),
        sqlite_where=sa.text(ORDERED_UNSENT),
    )


def downgrade() -> None:
    mysql_family = op.get_context().dialect.name in frozen.MYSQL
    op.drop_index("ix_outbox_ordering", table_name="outbox")
    op.drop_index(
        "ix_outbox_status_id" if mysql_family else "ix_outbox_claimable", table_name="outbox"
    )
    op.drop_table("outbox")
