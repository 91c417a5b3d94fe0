"""Index the unsent rows by status and age: the metrics' counts per status and the oldest
pending age read this partial index (PostgreSQL, SQLite) instead of the table's history.

MySQL/MariaDB have no partial index; their ``ix_outbox_status_seq_id`` already serves those
counts. PostgreSQL builds it CONCURRENTLY, outside the revision's transaction
(:func:`relay.migrations.online.create_index`): writers go on meanwhile. An index of that
name built beforehand is kept.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

from relay.migrations import frozen, online

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

UNSENT = "status IN ('pending', 'processing', 'failed')"


def upgrade() -> None:
    if op.get_context().dialect.name in frozen.MYSQL:
        return
    online.create_index("ix_outbox_unsent", ["status", "created_at"], where=UNSENT)


def downgrade() -> None:
    if op.get_context().dialect.name in frozen.MYSQL:
        return
    online.drop_index("ix_outbox_unsent")
