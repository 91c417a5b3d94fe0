"""Index only the rows that have a value: ``uq_outbox_ordering_key_seq`` covers rows with a
sequence number and ``ix_outbox_sent_at`` sent rows (PostgreSQL, SQLite; MySQL/MariaDB have no
partial index and keep both whole).

Every claim and every outcome writes a new version of the row with an entry in each index that
covers it (``status`` is indexed, so no update is HOT). Unkeyed rows had three ``(NULL, NULL)``
entries in the key index and two ``NULL`` ones in ``ix_outbox_sent_at`` over their life; now
they have one, written when they are sent: about a third less index work per event.

The rebuild builds the new index CONCURRENTLY under a name of its own, drops the old one
CONCURRENTLY and gives the new one its name (:mod:`relay.migrations.online`): writers go on
meanwhile. An index an operator built partial beforehand is found and left.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from relay.migrations import frozen, online

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

#: name -> (columns, unique, the rows it covers)
INDEXES = {
    "uq_outbox_ordering_key_seq": (["ordering_key", "seq"], True, "seq IS NOT NULL"),
    "ix_outbox_sent_at": (["sent_at"], False, "sent_at IS NOT NULL"),
}


def _definition(name: str) -> str:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        query = "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = :name"
    else:
        query = (
            "SELECT indexdef FROM pg_indexes WHERE indexname = :name"
            " AND schemaname = current_schema()"
        )
    return str(bind.execute(sa.text(query), {"name": name}).scalar() or "")


def _rebuild(name: str, where: str | None) -> None:
    columns, unique, _ = INDEXES[name]
    if op.get_context().dialect.name == "postgresql":
        # Beside the old one first, so the claim and the unique key are never without one.
        building = f"{name}_new"
        online.create_index(building, columns, where=where, unique=unique)
        online.drop_index(name)
        online.rename_index(building, name)
        return
    op.drop_index(name, table_name="outbox")
    rows = None if where is None else sa.text(where)
    op.create_index(
        name, "outbox", columns, unique=unique, postgresql_where=rows, sqlite_where=rows
    )


def upgrade() -> None:
    if op.get_context().dialect.name in frozen.MYSQL:
        return
    offline = op.get_context().as_sql  # ``--sql``: nothing to inspect, write the rebuild
    for name, (_, _, where) in INDEXES.items():
        if offline or " WHERE " not in _definition(name).upper():
            _rebuild(name, where)


def downgrade() -> None:
    if op.get_context().dialect.name in frozen.MYSQL:
        return
    for name in INDEXES:
        _rebuild(name, None)
