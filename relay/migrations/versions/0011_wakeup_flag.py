"""The outbox trigger notifies only while a relay listens idle: ``relay_wakeup (id, listening)``,
one row, and migration 0004's ``relay_outbox_notify()`` reads it before ``pg_notify``.

PostgreSQL takes one instance-wide lock while a transaction that issued ``NOTIFY`` commits (so
notifications queue in commit order): every notifying transaction commits alone and group
commit stops helping (32 single-row writers: 0.65x of the same table without the trigger).
Now the listener turns the flag on only after the relay has been idle a while and off as soon
as it is woken; while writers commit steadily the relay is busy, the flag stays off, and no
writer notifies. The trigger's read is a plain MVCC read of one row: no lock, so a writer
never waits on the relay. The row starts off: a listener turns it on once it finds the
outbox quiet. Other databases get the table (one schema everywhere) and no trigger.

Re-chain onto 0010 at merge: written beside 0010 (message ids), on 0009.

Revision ID: 0011
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0009"
branch_labels = None
depends_on = None

#: Frozen copy of ``relay.dispatch.listener.CHANNEL`` as of this revision.
CHANNEL = "relay_outbox"


def _function(body: str) -> str:
    return (
        "CREATE OR REPLACE FUNCTION relay_outbox_notify() RETURNS trigger "
        f"LANGUAGE plpgsql AS $$ BEGIN {body} RETURN NULL; END $$"
    )


def upgrade() -> None:
    op.create_table(
        "relay_wakeup",
        sa.Column("id", sa.SmallInteger, nullable=False, autoincrement=False),
        sa.Column("listening", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.CheckConstraint("id = 1", name=op.f("ck_relay_wakeup_one_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_relay_wakeup")),
    )
    op.execute("INSERT INTO relay_wakeup (id, listening) VALUES (1, false)")
    if op.get_context().dialect.name == "postgresql":
        op.execute(
            _function(
                "IF EXISTS (SELECT 1 FROM relay_wakeup WHERE listening) THEN "
                f"PERFORM pg_notify('{CHANNEL}', ''); END IF;"
            )
        )


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(_function(f"PERFORM pg_notify('{CHANNEL}', '');"))
    op.drop_table("relay_wakeup")
