"""The outbox trigger notifies only while a relay listens idle: a flag, the sequence
``relay_wakeup`` (0 off, 1 on), in a ``WHEN`` condition on migration 0004's trigger.

PostgreSQL takes one instance-wide lock while a transaction that issued ``NOTIFY`` commits (so
notifications queue in commit order): every notifying transaction commits alone and group
commit stops helping (32 single-row writers: 0.65x of the same table without the trigger).
Now the listener turns the flag on only after the relay has been idle a while and off as soon
as it is woken; while writers commit steadily the relay is busy, the flag stays off, and no
writer notifies.

Why a sequence in a ``WHEN``: the condition is evaluated in C before any trigger function is
called, and ``pg_sequence_last_value`` reads one page without a query, a snapshot or a lock a
writer could wait on. With the flag off a writer pays no PL/pgSQL call at all (a trigger
function reading a one-row table cost each statement about 0.07 ms of server time, this
``WHEN`` about 0.02). A sequence's value is not transactional: the flag changes the moment a
listener sets it. Every role may read it (``GRANT SELECT ... TO PUBLIC``), so no writer's
INSERT fails for want of a privilege on it. Other
databases have no trigger and no flag.


Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_CREATE = (
    "CREATE TRIGGER relay_outbox_notify AFTER INSERT ON outbox FOR EACH STATEMENT {when}"
    "EXECUTE FUNCTION relay_outbox_notify()"
)


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute("CREATE SEQUENCE relay_wakeup MINVALUE 0 MAXVALUE 1 START WITH 0")
    op.execute("SELECT setval('relay_wakeup', 0, true)")  # off, and readable from the start
    # Every writer's INSERT reads it: a role allowed to insert into outbox must not fail on it.
    op.execute("GRANT SELECT ON SEQUENCE relay_wakeup TO PUBLIC")
    op.execute("DROP TRIGGER relay_outbox_notify ON outbox")
    op.execute(_CREATE.format(when="WHEN (pg_sequence_last_value('relay_wakeup') = 1) "))


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER relay_outbox_notify ON outbox")
    op.execute(_CREATE.format(when=""))
    op.execute("DROP SEQUENCE relay_wakeup")
