"""Index the unsent rows by status and age: the metrics' counts per status and the oldest
pending age read this partial index (PostgreSQL, SQLite) instead of the table's history.

MySQL/MariaDB have no partial index; their ``ix_outbox_status_seq_id`` already serves those
counts. On a large PostgreSQL outbox, build the index beforehand without blocking writers
(``CREATE INDEX CONCURRENTLY ix_outbox_unsent ON outbox (status, created_at) WHERE status IN
('pending', 'processing', 'failed')``): this revision then finds it and does nothing.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from relay.migrations import frozen

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

UNSENT = "status IN ('pending', 'processing', 'failed')"


def upgrade() -> None:
    if op.get_context().dialect.name in frozen.MYSQL:
        return
    op.create_index(
        "ix_outbox_unsent",
        "outbox",
        ["status", "created_at"],
        postgresql_where=sa.text(UNSENT),
        sqlite_where=sa.text(UNSENT),
        if_not_exists=True,
    )


def downgrade() -> None:
    if op.get_context().dialect.name in frozen.MYSQL:
        return
    op.drop_index("ix_outbox_unsent", table_name="outbox")
