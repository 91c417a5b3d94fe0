"""Heartbeats: ``relay_heartbeats (name, beat_at)``, written by the tick (``relay doctor`` reads
how long ago ``celery beat`` last ticked).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0005"
down_revision = "0004"
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
        "relay_heartbeats",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column(
            "beat_at",
            ts,
            nullable=False,
            server_default=sa.text(NOW_DEFAULT.get(dialect, "CURRENT_TIMESTAMP")),
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_relay_heartbeats")),
    )


def downgrade() -> None:
    op.drop_table("relay_heartbeats")
