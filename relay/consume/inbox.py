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

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from relay.exceptions import EventError
from relay.produce.enqueue import in_transaction
from relay.store import dialects

#: Both columns are VARCHAR(255): a longer value would be refused (or, on MySQL's INSERT
#: IGNORE, truncated into a false duplicate), so it is refused here first.
MAX_NAME_BYTES = 255
#: Rows one :func:`purge` call deletes at most, by default.
PURGE_BATCH_SIZE = 1000


def claim(session_or_connection: Session | Connection, consumer: str, message_id: str) -> bool:
    """True the first time ``consumer`` claims ``message_id`` in this transaction's view of
    the world, False when it already processed it; the claim commits or rolls back with the
    caller's transaction."""
    conn = in_transaction(session_or_connection, "the inbox claim must share the handler's")
    values = {
        "consumer": _name("consumer", consumer),
        "message_id": _name("message_id", message_id),
    }
    # PostgreSQL and SQLite tell by a returned row (psycopg reports no row count here).
    result = conn.execute(dialects.for_name(conn.dialect.name).inbox_claim(), values)
    if result.returns_rows:
        return result.first() is not None
    return result.rowcount == 1


def purge(
    conn: Connection, older_than_seconds: float, *, batch_size: int = PURGE_BATCH_SIZE
) -> int:
    """Delete inbox rows received more than ``older_than_seconds`` ago, at most ``batch_size``;
    returns how many. Call it until it returns less than ``batch_size``."""
    dialect = dialects.for_name(conn.dialect.name)
    return dialect.purge_inbox(conn, float(older_than_seconds), batch_size)


def _name(field: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise EventError(field, f"must be a non-empty str, not {value!r}")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise EventError(field, f"is over {MAX_NAME_BYTES} bytes in UTF-8")
    return value


__all__ = ["claim", "purge"]
