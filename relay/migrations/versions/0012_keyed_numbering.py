"""Every keyed writer gets its key's next number: a row inserted with an ``ordering_key`` and
no ``seq`` is numbered by a trigger, inside the writer's own transaction, on every database.

The trigger does what ``relay.enqueue`` did with two or three statements of its own: it takes
the key's next number from ``outbox_sequence`` (an upsert, whose row lock lasts until the
writer's transaction ends, so numbers follow commit order and a rollback gives its number
back) and creates the key's ``outbox_progress`` row with its first number. A row that already
carries a ``seq`` keeps it; an unkeyed row is left alone:

- PostgreSQL: a ``BEFORE INSERT`` row trigger whose ``WHEN`` is evaluated in C before any
  function call, so an unkeyed (or already numbered) row pays no PL/pgSQL call. The function is
  ``SECURITY DEFINER`` (it runs as the owner who migrated), so a role that may only ``INSERT``
  into ``outbox`` numbers its keys without any privilege on the two tables; its relations are
  schema-qualified and its ``search_path`` pinned, so a caller's ``search_path`` cannot
  redirect it.
- MySQL/MariaDB: a ``BEFORE INSERT`` row trigger (it runs with its definer's privileges).
- SQLite: a ``BEFORE`` trigger cannot change ``NEW``, so an ``AFTER INSERT`` trigger numbers
  the new row with an ``UPDATE`` (SQLite serializes write transactions anyway).

Rows numbered before this revision keep their numbers; keyed rows left unnumbered by older
plain-SQL writers stay in the unordered lane (the trigger fires on new rows only).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

TRIGGER = "relay_outbox_seq"

# Built by a DO block so that the body names the schema the migration runs in (read when it
# runs, so the offline script works too): a caller's search_path cannot redirect the tables.
_PG_FUNCTION = """
DO $do$ BEGIN EXECUTE format($create$
CREATE FUNCTION %1$I.relay_outbox_seq() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    INSERT INTO %1$I.outbox_sequence AS s (ordering_key, last_seq)
        VALUES (NEW.ordering_key, 1)
        ON CONFLICT (ordering_key) DO UPDATE SET last_seq = s.last_seq + 1
        RETURNING s.last_seq INTO NEW.seq;
    IF NEW.seq = 1 THEN
        INSERT INTO %1$I.outbox_progress (ordering_key, sent_seq)
            VALUES (NEW.ordering_key, 0) ON CONFLICT (ordering_key) DO NOTHING;
    END IF;
    RETURN NEW;
END
$fn$
$create$, current_schema()); END $do$
"""

_PG_TRIGGER = """
CREATE TRIGGER relay_outbox_seq BEFORE INSERT ON outbox FOR EACH ROW
WHEN (NEW.ordering_key IS NOT NULL AND NEW.seq IS NULL)
EXECUTE FUNCTION relay_outbox_seq()
"""

# The SELECT after the upsert reads this transaction's own new version of the row (a consistent
# read always sees its own changes), so no LAST_INSERT_ID() is involved: that one is the
# outbox's AUTO_INCREMENT id the caller reads back.
_MYSQL_TRIGGER = """
CREATE TRIGGER relay_outbox_seq BEFORE INSERT ON outbox FOR EACH ROW
BEGIN
    IF NEW.ordering_key IS NOT NULL AND NEW.seq IS NULL THEN
        INSERT INTO outbox_sequence (ordering_key, last_seq) VALUES (NEW.ordering_key, 1)
            ON DUPLICATE KEY UPDATE last_seq = last_seq + 1;
        SET NEW.seq = (
            SELECT last_seq FROM outbox_sequence WHERE ordering_key = NEW.ordering_key
        );
        IF NEW.seq = 1 THEN
            INSERT IGNORE INTO outbox_progress (ordering_key, sent_seq)
                VALUES (NEW.ordering_key, 0);
        END IF;
    END IF;
END
"""

_SQLITE_TRIGGER = """
CREATE TRIGGER relay_outbox_seq AFTER INSERT ON outbox FOR EACH ROW
WHEN NEW.ordering_key IS NOT NULL AND NEW.seq IS NULL
BEGIN
    INSERT INTO outbox_sequence (ordering_key, last_seq) VALUES (NEW.ordering_key, 1)
        ON CONFLICT (ordering_key) DO UPDATE SET last_seq = last_seq + 1;
    INSERT OR IGNORE INTO outbox_progress (ordering_key, sent_seq)
        VALUES (NEW.ordering_key, 0);
    UPDATE outbox SET seq = (
        SELECT last_seq FROM outbox_sequence WHERE ordering_key = NEW.ordering_key
    ) WHERE id = NEW.id;
END
"""


def upgrade() -> None:
    name = op.get_context().dialect.name
    if name == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute(_PG_TRIGGER)
    elif name in ("mysql", "mariadb"):
        op.execute(_MYSQL_TRIGGER)
    else:
        op.execute(_SQLITE_TRIGGER)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(f"DROP TRIGGER {TRIGGER} ON outbox")
        op.execute("DROP FUNCTION relay_outbox_seq()")
    else:
        op.execute(f"DROP TRIGGER {TRIGGER}")
