"""Levers for an incident: pauses, deadlines and rate limits, all optional and all additive.

- ``relay_pauses``: one row per pause in force (an event-type pattern, an ordering key, or a
  database name), written by ``relay pause`` and the console, read by every relay.
- ``relay_rate_buckets``: one token bucket per rate limit, shared by
  every relay of the database and refilled by the database clock.
- ``outbox.expires_at``: a nullable deadline; a row claimed past it is dead-lettered, never
  published.

Online: two new tables and a nullable column without a default (a change of the catalogue
only, on PostgreSQL and on MariaDB's ``ALGORITHM=INSTANT, LOCK=NONE``); no row of ``outbox``
is rewritten. Its lock on ``outbox`` is taken under the short lock timeout of
:mod:`relay.migrations.online`, so a long report holding the outbox open delays the migration,
never the writers.
Relays of 1.1 ignore all three and keep working beside the new ones.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from relay.migrations import frozen, online

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

#: Frozen copy of what a pause can hold back.
PAUSE_KINDS = "'event_type', 'key', 'database'"


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    online.bound_lock_wait()
    # The outbox first: it is the one table a live relay and the application hold, so the one
    # statement that may time out on a lock (and be retried); on MariaDB, whose DDL commits
    # as it goes, a retry then finds nothing of this revision made yet.
    column = sa.Column("expires_at", frozen.timestamp(), nullable=True)
    if dialect in frozen.MYSQL:
        op.execute(
            "ALTER TABLE outbox ADD COLUMN expires_at DATETIME(6) NULL,"
            " ALGORITHM=INSTANT, LOCK=NONE"
        )
    else:
        op.add_column("outbox", column)
    op.create_table(
        "relay_pauses",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("value", sa.String(255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("paused_by", sa.String(255), nullable=True),
        frozen.clock_column("paused_at"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_relay_pauses")),
        sa.UniqueConstraint("kind", "value", name=op.f("uq_relay_pauses_kind_value")),
        sa.CheckConstraint(f"kind IN ({PAUSE_KINDS})", name=op.f("ck_relay_pauses_kind")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "relay_rate_buckets",
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("tokens", sa.Float(), nullable=False),
        frozen.clock_column("refilled_at"),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_relay_rate_buckets")),
    )


def downgrade() -> None:
    # Plain ALTER TABLE everywhere (SQLite since 3.35): a batch copy on SQLite would drop the
    # outbox's triggers (0012) with the table it rebuilds.
    op.execute("ALTER TABLE outbox DROP COLUMN expires_at")
    op.drop_table("relay_rate_buckets")
    op.drop_table("relay_pauses")
