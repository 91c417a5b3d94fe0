"""``outbox.event_id``: a random UUID per row, the message id unique across outboxes.

The column is added without a default first, so no database writes it into every row of a
long sent history (a volatile default would rewrite the whole table on PostgreSQL); the
default then applies to new rows, and only unfinished rows (pending, processing, failed) get
an id here, through ``ix_outbox_unsent`` on PostgreSQL. Sent rows keep NULL: their messages
went out with the outbox id, which a rebuilt message of such a row carries again.

A row the old relay had published but not yet marked sent when this ran is published again
with its new id, which a consumer's inbox has not seen: that event may take effect twice
(docs/guarantees.md, "Upgrading to event ids"). Nothing is lost.

SQLite cannot add a column with an expression default (nor change a column's default) without
rebuilding the table, which needs the live table in hand (no ``--sql`` mode): there a trigger
writes the id of a row inserted without one, in the inserting statement.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

#: Frozen copies of ``relay.store.schema.eventids.DEFAULTS``.
SQLITE_UUID4 = (
    "(lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' || "
    "substr(lower(hex(randomblob(2))), 2) || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) || "
    "substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6))))"
)
DEFAULTS = {
    "postgresql": "(gen_random_uuid())::text",
    "mysql": "(uuid())",
    "mariadb": "(uuid())",
    "sqlite": SQLITE_UUID4,
}
UNFINISHED = "status IN ('pending', 'processing', 'failed')"
SQLITE_TRIGGER = f"""CREATE TRIGGER outbox_event_id AFTER INSERT ON outbox
FOR EACH ROW WHEN NEW.event_id IS NULL
BEGIN
    UPDATE outbox SET event_id = {SQLITE_UUID4} WHERE id = NEW.id;
END"""


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    default = DEFAULTS[dialect]
    op.add_column("outbox", sa.Column("event_id", sa.String(36), nullable=True))
    if dialect == "sqlite":
        op.execute(SQLITE_TRIGGER)
    else:
        op.alter_column("outbox", "event_id", server_default=sa.text(default))
    op.execute(f"UPDATE outbox SET event_id = {default} WHERE {UNFINISHED}")


def downgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS outbox_event_id")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("event_id")
