"""How ``relay.enqueue`` numbered a keyed event before migration 0012's trigger did it in the
database: lock the key's ``outbox_sequence`` row and take its next number (the key's first
number also creates its progress row), then insert the row with that number. The relay no
longer runs it; :mod:`bench.producers` measures it against the trigger, and the migration test
of rows numbered before 0012 writes them this way.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Connection, Insert, Select, Update, bindparam, func, select, update
from sqlalchemy.dialects import mysql, postgresql, sqlite

from relay.store import dialects
from relay.store.schema.tables import outbox, outbox_sequence


def next_seq(conn: Connection, key: str) -> int:
    """Key ``key``'s next number, its sequence row locked until the transaction ends."""
    if conn.dialect.name in ("mysql", "mariadb"):
        seq = _mysql_next_seq(conn, key)
    else:
        seq = int(conn.execute(_take_seq(conn.dialect.name), {"key": key}).scalar_one())
    if seq == 1:
        conn.execute(dialects.for_name(conn.dialect.name).start_progress(), {"key": key})
    return seq


def insert_numbered(conn: Connection, values: dict[str, Any]) -> None:
    """Insert one event whose ``values`` carry its ``seq`` (the trigger leaves such rows be)."""
    conn.execute(_insert_event(conn.dialect.name), values)


@functools.cache
def _insert_event(name: str) -> Insert:
    """``relay.enqueue``'s insert with ``seq`` bound too, built once per database."""
    statement = dialects.for_name(name).insert_event(delayed=False)
    return statement.values(seq=bindparam("seq", type_=outbox.c.seq.type))


@functools.cache
def _take_seq(name: str) -> Any:
    """``INSERT … ON CONFLICT DO UPDATE SET last_seq = last_seq + 1 RETURNING last_seq``."""
    upsert = postgresql.insert if name == "postgresql" else sqlite.insert
    stmt = upsert(outbox_sequence).values(ordering_key=bindparam("key"), last_seq=1)
    return stmt.on_conflict_do_update(
        index_elements=[outbox_sequence.c.ordering_key],
        set_={"last_seq": outbox_sequence.c.last_seq + 1},
    ).returning(outbox_sequence.c.last_seq)


def _mysql_next_seq(conn: Connection, key: str) -> int:
    """The row lock of an existing key is a plain UPDATE; only a key's first writer inserts,
    which is where InnoDB can pick a deadlock victim among racing inserters (it rolls the whole
    transaction back: the caller retries the transaction)."""
    if conn.execute(_MYSQL_BUMP, {"key": key}).rowcount == 0:
        conn.execute(_MYSQL_TAKE, {"key": key})
    return int(conn.execute(_MYSQL_LAST).scalar_one())


#: ``UPDATE … SET last_seq = LAST_INSERT_ID(last_seq + 1)`` for key ``key``.
_MYSQL_BUMP: Update = (
    update(outbox_sequence)
    .where(outbox_sequence.c.ordering_key == bindparam("key"))
    .values(last_seq=func.last_insert_id(outbox_sequence.c.last_seq + 1))
)
#: ``INSERT … VALUES (key, LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE last_seq =
#: LAST_INSERT_ID(last_seq + 1)``: a new key (or one created meanwhile).
_MYSQL_TAKE: Insert = (
    mysql.insert(outbox_sequence)
    .values(ordering_key=bindparam("key"), last_seq=func.last_insert_id(1))
    .on_duplicate_key_update(last_seq=func.last_insert_id(outbox_sequence.c.last_seq + 1))
)
#: ``SELECT LAST_INSERT_ID()``: the number the statement before set, per session.
_MYSQL_LAST: Select[Any] = select(func.last_insert_id())
