"""Room on each outbox page for the row's next versions: ``fillfactor = 50`` on PostgreSQL.

Every event writes three versions of its row (inserted, claimed, sent), and neither update can
be HOT: each changes a column an index covers or filters on (``status``, ``locked_until``,
``sent_at``). Packed full (the default 100), a page has no room for the claim's versions, so
each lands on another page and the sent outcome's on a third: two pages dirtied per update, a
WAL record naming both, and more full-page images after each checkpoint. Half-empty pages keep
a row's versions on its own page, where pruning reclaims the dead ones as the next update
comes. Measured (``bench/versus.py``, docs/benchmarks.md): the relay's WAL per event about
halved. The price: the table takes up to twice the pages for the rows it keeps (sent history
within the retention), space that vacuum hands back to new rows.

Online: ``ALTER TABLE … SET (fillfactor)`` takes a SHARE UPDATE EXCLUSIVE lock (writers and
readers go on), under the short lock timeout of :mod:`relay.migrations.online`, and rewrites
nothing: pages written from now on follow it. Other databases: no change (InnoDB has no
per-table fill factor; SQLite none). Relays of any 1.x release run on it unchanged.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

from relay.migrations import online

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

#: Frozen copy of the outbox's fill factor (``relay.store.schema.tables``).
FILLFACTOR = 50


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    online.bound_lock_wait()
    op.execute(f"ALTER TABLE outbox SET (fillfactor = {FILLFACTOR})")


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    online.bound_lock_wait()
    op.execute("ALTER TABLE outbox RESET (fillfactor)")
