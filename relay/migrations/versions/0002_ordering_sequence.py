"""Per-key sequence numbers: ``outbox.seq``, ``outbox_sequence`` and ``outbox_progress``.

Rows written before this revision keep ``seq`` NULL and are relayed unordered (see
docs/ordering.md): drain keyed rows before upgrading if their order matters.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

MYSQL = ("mysql", "mariadb")
UNFINISHED = "status IN ('pending', 'processing')"
UNORDERED_UNFINISHED = f"{UNFINISHED} AND seq IS NULL"
ORDERED_UNSENT = "ordering_key IS NOT NULL AND status <> 'sent'"


def upgrade() -> None:
    mysql_family = op.get_context().dialect.name in MYSQL
    op.add_column("outbox", sa.Column("seq", sa.BigInteger(), nullable=True))
    op.drop_index("ix_outbox_ordering", table_name="outbox")
    if mysql_family:
        op.drop_index("ix_outbox_status_id", table_name="outbox")
        op.create_index("ix_outbox_status_seq_id", "outbox", ["status", "seq", "id"])
    else:
        op.drop_index("ix_outbox_claimable", table_name="outbox")
        op.create_index(
            "ix_outbox_claimable",
            "outbox",
            ["id"],
            postgresql_where=sa.text(UNORDERED_UNFINISHED),
            sqlite_where=sa.text(UNORDERED_UNFINISHED),
        )
    op.create_index("uq_outbox_ordering_key_seq", "outbox", ["ordering_key", "seq"], unique=True)
    op.create_table(
        "outbox_sequence",
        sa.Column("ordering_key", sa.String(255), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("ordering_key", name=op.f("pk_outbox_sequence")),
    )
    op.create_table(
        "outbox_progress",
        sa.Column("ordering_key", sa.String(255), nullable=False),
        sa.Column("sent_seq", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.PrimaryKeyConstraint("ordering_key", name=op.f("pk_outbox_progress")),
    )


def downgrade() -> None:
    mysql_family = op.get_context().dialect.name in MYSQL
    op.drop_table("outbox_progress")
    op.drop_table("outbox_sequence")
    op.drop_index("uq_outbox_ordering_key_seq", table_name="outbox")
    if mysql_family:
        op.drop_index("ix_outbox_status_seq_id", table_name="outbox")
        op.create_index("ix_outbox_status_id", "outbox", ["status", "id"])
    else:
        op.drop_index("ix_outbox_claimable", table_name="outbox")
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
    op.drop_column("outbox", "seq")
