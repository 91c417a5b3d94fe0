"""The consumer-side inbox: each message takes effect once per consumer.

:func:`claim` runs in the consumer's own transaction, beside the handler's writes: the first
claim of ``(consumer, message_id)`` inserts a row and returns True; a later one finds the row and
returns False; a rollback takes the row away with everything else the handler did. Two
transactions racing on one id meet at the primary key: the second waits for the first to end,
then inserts (the first rolled back) or finds the row (it committed).

Retention: :func:`purge` deletes rows received longer ago than a duration. That duration must
exceed the longest time a message can come back: broker redelivery, the relay's retries
(``RELAY_MAX_ATTEMPTS`` x ``RELAY_BACKOFF_MAX_SECONDS``) and an operator's re-drive of a dead
letter (``relay failed retry`` re-sends the same outbox id days later). A message redelivered
after its inbox row was purged runs again.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.orm import Session

from relay.exceptions import EventError
from relay.produce.enqueue import in_transaction
from relay.store import dialects
from relay.store.schema import inbox

#: Both columns are VARCHAR(255): a longer value would be refused (or, on MySQL's INSERT
#: IGNORE, truncated into a false duplicate), so it is refused here first.
MAX_NAME_BYTES = 255


def claim(session_or_connection: Session | Connection, consumer: str, message_id: str) -> bool:
    """True the first time ``consumer`` claims ``message_id`` in this transaction's view of
    the world, False when it already processed it; the claim commits or rolls back with the
    caller's transaction."""
    conn = in_transaction(session_or_connection, "the inbox claim must share the handler's")
    values = {
        "consumer": _name("consumer", consumer),
        "message_id": _name("message_id", message_id),
    }
    result = conn.execute(_insert_once(conn.dialect.name), values)
    if result.returns_rows:
        return result.first() is not None
    return result.rowcount == 1


def purge(conn: Connection, older_than_seconds: float, *, batch_size: int = 1000) -> int:
    """Delete inbox rows received more than ``older_than_seconds`` ago, at most ``batch_size``;
    returns how many. Call it until it returns less than ``batch_size``."""
    dialect = dialects.for_name(conn.dialect.name)
    cutoff = dialect.now_plus(sa.literal(-float(older_than_seconds), sa.Float))
    oldest = (
        sa.select(inbox.c.consumer, inbox.c.message_id)
        .where(inbox.c.received_at < cutoff)
        .order_by(inbox.c.received_at)
        .limit(batch_size)
    )
    if conn.dialect.name in ("mysql", "mariadb"):
        # MySQL cannot select from the table a DELETE targets: materialise the keys first.
        keys = [tuple(row) for row in conn.execute(oldest)]
        if not keys:
            return 0
        stmt = sa.delete(inbox).where(sa.tuple_(inbox.c.consumer, inbox.c.message_id).in_(keys))
        return int(conn.execute(stmt).rowcount)
    stmt = sa.delete(inbox).where(sa.tuple_(inbox.c.consumer, inbox.c.message_id).in_(oldest))
    return int(conn.execute(stmt).rowcount)


def _insert_once(dialect_name: str) -> Any:
    """INSERT that does nothing when the primary key exists (after waiting for a concurrent,
    uncommitted insert of the same key to end); RETURNING tells whether it inserted, since
    psycopg reports no row count here."""
    if dialect_name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(inbox).on_conflict_do_nothing().returning(inbox.c.consumer)
    if dialect_name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(inbox).on_conflict_do_nothing().returning(inbox.c.consumer)
    # MySQL: IGNORE turns only the duplicate key into "0 rows"; lengths are checked above, so
    # no truncation can hide behind it.
    return sa.insert(inbox).prefix_with("IGNORE")


def _name(field: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise EventError(field, f"must be a non-empty str, not {value!r}")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise EventError(field, f"is over {MAX_NAME_BYTES} bytes in UTF-8")
    return value


__all__ = ["claim", "purge"]
