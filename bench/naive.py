"""THE NAIVE RELAY: the simple implementation people write first. A baseline, not the product.

One row per transaction: SELECT one pending row FOR UPDATE SKIP LOCKED, publish it and wait for
the broker's confirm (Kombu ``confirm_publish``), mark it sent, commit. The row lock and the
transaction stay open across the broker round trip, and every event pays a confirm round trip
and a commit of its own. Same message format as the relay (``relay.message.build``).

Run as ``python -m bench.naive`` with ``RELAY_DATABASE_URL``, ``RELAY_EVENTS_URL`` and
``RELAY_EXCHANGE``; it loops until SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import kombu
import sqlalchemy as sa

from bench.procs import BENCH_READY
from relay import message
from relay.engine import normalize_url
from relay.records import ClaimedEvent

PICK_ONE = sa.text(
    "SELECT id, event_type, payload, headers, ordering_key, attempt, created_at FROM outbox "
    "WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
)
MARK_SENT = sa.text(
    "UPDATE outbox SET status = 'sent', attempt = attempt + 1, sent_at = now(), "
    "updated_at = now() WHERE id = :id"
)


def relay_one(conn: sa.Connection, producer: kombu.Producer) -> bool:
    """Move one row inside the caller's open transaction; False when none is pending."""
    row = conn.execute(PICK_ONE).mappings().first()
    if row is None:
        return False
    event = ClaimedEvent.from_row({**row, "attempt": row["attempt"] + 1})
    msg = message.build(event)
    producer.publish(
        msg.body,
        routing_key=msg.routing_key,
        mandatory=True,
        retry=False,
        **message.properties(msg),
    )
    conn.execute(MARK_SENT, {"id": event.id})
    return True


def run(database_url: str, events_url: str, exchange_name: str, stop: threading.Event) -> int:
    """Relay rows one transaction at a time until ``stop`` is set; returns how many moved."""
    engine = sa.create_engine(normalize_url(database_url))
    exchange = kombu.Exchange(exchange_name, type="topic", durable=True)
    moved = 0
    with kombu.Connection(events_url, transport_options={"confirm_publish": True}) as conn:
        producer = kombu.Producer(conn.default_channel, exchange=exchange)
        print(BENCH_READY, file=sys.stderr, flush=True)
        while not stop.is_set():
            with engine.begin() as db:
                found = relay_one(db, producer)
            if found:
                moved += 1
            else:
                stop.wait(float(os.environ.get("RELAY_TICK_SECONDS", "1")))
    engine.dispose()
    return moved


def main() -> None:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    run(
        os.environ["RELAY_DATABASE_URL"],
        os.environ["RELAY_EVENTS_URL"],
        os.environ.get("RELAY_EXCHANGE", "outbox"),
        stop,
    )


if __name__ == "__main__":
    main()
