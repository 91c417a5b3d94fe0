"""Writers pay nothing for the wake-up: the NOTIFY trigger and its flag are dropped.

Since 0004 a statement-level trigger NOTIFYed the relay at every commit that inserted into
``outbox`` (since 0011 only while a flag said a relay listened idle). PostgreSQL takes one
instance-wide lock while a transaction that issued ``NOTIFY`` commits, so notifying writers
committed one at a time; with the flag off each statement still evaluated the trigger's
``WHEN`` (about 3 µs of server time a statement, 5-10% of a single-row transaction's commits
at 32 writers; issue 27). The relay now watches the sequence that numbers ``outbox.id``
instead (``relay.wakeup.watcher``): every insert moves it before its transaction commits, and
reading it touches nothing a writer locks. Relays older than this revision keep working on
their tick (a second at most) until they are upgraded.

The relay's role needs ``SELECT`` on ``outbox_id_seq`` to watch it (docs/postgresql.md);
without it the relay says so and polls. Other databases: no change (they had no trigger).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

#: Frozen copy of the channel the dropped trigger notified (0004).
CHANNEL = "relay_outbox"


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER IF EXISTS relay_outbox_notify ON outbox")
    op.execute("DROP FUNCTION IF EXISTS relay_outbox_notify()")
    op.execute("DROP SEQUENCE IF EXISTS relay_wakeup")


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    # As 0011 left them: the flag off, the trigger notifying only while it is on.
    op.execute("CREATE SEQUENCE relay_wakeup MINVALUE 0 MAXVALUE 1 START WITH 0")
    op.execute("SELECT setval('relay_wakeup', 0, true)")
    op.execute("GRANT SELECT ON SEQUENCE relay_wakeup TO PUBLIC")
    op.execute(
        "CREATE OR REPLACE FUNCTION relay_outbox_notify() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ BEGIN "
        f"PERFORM pg_notify('{CHANNEL}', ''); RETURN NULL; "
        "END $$"
    )
    op.execute(
        "CREATE TRIGGER relay_outbox_notify AFTER INSERT ON outbox FOR EACH STATEMENT "
        "WHEN (pg_sequence_last_value('relay_wakeup') = 1) EXECUTE FUNCTION relay_outbox_notify()"
    )
