"""The benchmark's events: one payload shape (~200 bytes of JSON), written straight in SQL, and
the counts that say when the relay is done with them."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from relay.records import ClaimedEvent
from relay.store.schema.tables import outbox, outbox_progress, outbox_sequence

EVENT_TYPE = "order.created"
#: Fixed fields of every payload; ``n`` (the row number) is added per event.
PAYLOAD: dict[str, Any] = {
    "customer_id": "c-0000481516",
    "currency": "EUR",
    "total": "1234.50",
    "items": [{"sku": "SKU-000042", "qty": 2}, {"sku": "SKU-001337", "qty": 1}],
    "note": "benchmark payload, padded to about two hundred bytes of JSON",
}
HEADERS: dict[str, Any] = {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "tenant": "acme"}
_CHUNK = 5_000


def payload(n: int) -> dict[str, Any]:
    return {**PAYLOAD, "n": n}


def claimed(n: int, attempt: int = 1) -> ClaimedEvent:
    """The event the relay would have claimed for row ``n``: used to build identical messages."""
    return ClaimedEvent(
        id=n,
        event_type=EVENT_TYPE,
        payload=payload(n),
        headers=dict(HEADERS),
        ordering_key=None,
        attempt=attempt,
        created_at=datetime.now(UTC),
    )


def insert_pending(engine: sa.Engine, count: int) -> None:
    """Insert ``count`` pending rows in one committed transaction."""
    if engine.dialect.name == "postgresql":
        insert_rows(engine, count, status="pending", chunk=count or 1)
        return
    with engine.begin() as conn:
        for start in range(0, count, _CHUNK):
            values = [
                {"event_type": EVENT_TYPE, "payload": payload(n), "headers": HEADERS}
                for n in range(start + 1, min(count, start + _CHUNK) + 1)
            ]
            conn.execute(sa.insert(outbox), values)


def insert_rows(engine: sa.Engine, count: int, *, status: str, chunk: int = 500_000) -> None:
    """Insert ``count`` rows of ``status`` on PostgreSQL with ``INSERT … SELECT
    generate_series``, in chunks of ``chunk`` rows per transaction (sent rows get ``sent_at``
    and ``attempt = 1``): millions of rows in seconds."""
    sent = status == "sent"
    stmt = sa.text(
        "INSERT INTO outbox (event_type, payload, headers, status, attempt, sent_at) "
        "SELECT :event_type, CAST(:payload AS jsonb) || jsonb_build_object('n', g), "
        "CAST(:headers AS jsonb), :status, :attempt, "
        f"{'now()' if sent else 'NULL'} "
        "FROM generate_series(1, :count) AS g"
    )
    done = 0
    while done < count:
        n = min(chunk, count - done)
        with engine.begin() as conn:
            conn.execute(
                stmt,
                {
                    "event_type": EVENT_TYPE,
                    "payload": json.dumps(PAYLOAD),
                    "headers": json.dumps(HEADERS),
                    "status": status,
                    "attempt": 1 if sent else 0,
                    "count": n,
                },
            )
        done += n


def unfinished(bind: sa.Engine | sa.Connection) -> int:
    """Rows still pending or processing (counted through the partial index: literal statuses,
    so that a generic plan still matches the index's predicate). On a connection, each count
    is its own transaction, so the next one sees the workers' commits."""
    query = sa.text("SELECT count(*) FROM outbox WHERE status IN ('pending', 'processing')")
    if isinstance(bind, sa.Connection):
        try:
            return int(bind.execute(query).scalar_one())
        finally:
            bind.rollback()
    with bind.connect() as conn:
        return int(conn.execute(query).scalar_one())


def backend_pid(conn: sa.Connection) -> int | None:
    """The server process of ``conn`` on PostgreSQL (None elsewhere)."""
    if conn.dialect.name != "postgresql":
        return None
    try:
        return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
    finally:
        conn.rollback()


def clear(engine: sa.Engine) -> None:
    """Empty the outbox and its per-key sequence and progress (TRUNCATE on PostgreSQL, so no
    dead rows are left for the next run to step over)."""
    tables = (outbox, outbox_sequence, outbox_progress)
    for attempt in range(5):
        try:
            with engine.begin() as conn:
                if engine.dialect.name == "postgresql":
                    conn.execute(sa.text(f"TRUNCATE {', '.join(t.name for t in tables)}"))
                else:
                    for table in tables:
                        conn.execute(sa.delete(table))
            return
        except sa.exc.OperationalError as exc:
            # Relays still polling between runs lock these tables in another order than
            # TRUNCATE does; the database aborts one side of that deadlock: try again.
            if "deadlock" not in str(exc).lower() or attempt == 4:
                raise
            time.sleep(0.1)
