"""The consumers' inbox: ``relay_inbox (consumer, message_id, received_at)``.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

MYSQL = ("mysql", "mariadb")
#: The database clock in UTC (a frozen copy of relay.timestamps.utc_now, as in 0001).
NOW_DEFAULT = {
    "postgresql": "now()",
    "mysql": "(UTC_TIMESTAMP(6))",
    "mariadb": "(UTC_TIMESTAMP(6))",
    "sqlite": "(strftime('%Y-%m-%d %H:%M:%f000', 'now'))",
}


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    ts = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), *MYSQL)
    op.create_table(
        "relay_inbox",
        sa.Column("consumer", sa.String(255), nullable=False),
        sa.Column("message_id", sa.String(255), nullable=False),
        sa.Column(
            "received_at",
            ts,
            nullable=False,
            server_default=sa.text(NOW_DEFAULT.get(dialect, "CURRENT_TIMESTAMP")),
        ),
        sa.PrimaryKeyConstraint("consumer", "message_id", name=op.f("pk_relay_inbox")),
    )
    op.create_index("ix_relay_inbox_received_at", "relay_inbox", ["received_at"])


def downgrade() -> None:
    op.drop_index("ix_relay_inbox_received_at", table_name="relay_inbox")
    op.drop_table("relay_inbox")
