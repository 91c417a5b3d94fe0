"""PostgreSQL: NOTIFY ``relay_outbox`` once per statement that inserts into ``outbox``.

A statement-level AFTER INSERT trigger, so any writer (``relay.enqueue``, plain SQL, another
language) wakes the relay's listener with no change to how it writes. PostgreSQL delivers a
notification only when the transaction commits (nothing for a rollback) and folds duplicates
within one transaction, so a transaction of any size costs one notification. The payload is
empty: the notification is a hint to claim, never the data. Other databases get no trigger;
the relay polls them adaptively.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

#: The channel the relay LISTENed on as of this revision (its listener is gone since 0014).
CHANNEL = "relay_outbox"


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute(
        "CREATE OR REPLACE FUNCTION relay_outbox_notify() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ BEGIN "
        f"PERFORM pg_notify('{CHANNEL}', ''); RETURN NULL; "
        "END $$"
    )
    op.execute(
        "CREATE TRIGGER relay_outbox_notify AFTER INSERT ON outbox "
        "FOR EACH STATEMENT EXECUTE FUNCTION relay_outbox_notify()"
    )


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER IF EXISTS relay_outbox_notify ON outbox")
    op.execute("DROP FUNCTION IF EXISTS relay_outbox_notify()")
