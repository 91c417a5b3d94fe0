"""Split the unordered claim's index by status: ``ix_outbox_pending`` holds pending rows in id
order and ``ix_outbox_leases`` leased rows (only a processing row has a lease) by its end,
both without a sequence number (PostgreSQL, SQLite; MySQL/MariaDB read each status from
``ix_outbox_status_seq_id`` already).

``ix_outbox_claimable`` held both statuses in id order, so every claim walked past the rows
other workers held (up to workers x 2 batches) before it reached a pending one, reading each
from the table to see that its lease still ran. A row has the same number of index entries as
before: its pending version one in ``ix_outbox_pending``, its processing version one in
``ix_outbox_leases``.

PostgreSQL builds both CONCURRENTLY and drops the old one CONCURRENTLY, each outside the
revision's transaction (:mod:`relay.migrations.online`): writers go on meanwhile. Indexes of
those names built beforehand are kept.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

from relay.migrations import frozen, online

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

#: name -> (column, the rows it covers)
INDEXES = {
    "ix_outbox_pending": ("id", "status = 'pending' AND seq IS NULL"),
    "ix_outbox_leases": ("locked_until", "locked_until IS NOT NULL AND seq IS NULL"),
}
CLAIMABLE = "status IN ('pending', 'processing') AND seq IS NULL"


def upgrade() -> None:
    if op.get_context().dialect.name in frozen.MYSQL:
        return
    for name, (column, where) in INDEXES.items():
        online.create_index(name, [column], where=where)
    online.drop_index("ix_outbox_claimable")


def downgrade() -> None:
    if op.get_context().dialect.name in frozen.MYSQL:
        return
    online.create_index("ix_outbox_claimable", ["id"], where=CLAIMABLE)
    for name in INDEXES:
        online.drop_index(name)
