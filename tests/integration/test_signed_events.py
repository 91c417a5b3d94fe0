"""Signed events end to end, against real PostgreSQL and RabbitMQ (and Redis): the relay signs
what it publishes with ``RELAY_SIGNING_KEYS``; a consumer holding the keys runs the relay's
events and dead-letters, unhandled, a message someone else published to the exchange (unsigned,
or signed with another key), with the reason."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import kombu
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.config import Settings
from relay.consume import Keyring, peek
from relay.consume.consumer import Event, EventConsumer, QueueHandlers
from relay.store.engine import create_engine
from tests.support import events_app, relaying
from tests.support.env import wait_until

pytestmark = pytest.mark.timeout(120)

KEYS = "k2026=" + "n" * 40 + ",k2025=" + "o" * 40


@pytest.fixture
def pg_engine(pg_url: str) -> Iterator[sa.Engine]:
    engine = create_engine(pg_url)
    events_app.metadata.create_all(engine)
    yield engine
    engine.dispose()


def _handled(engine: sa.Engine) -> list[int]:
    with engine.connect() as conn:
        return sorted(conn.execute(sa.select(events_app.handled.c.n)).scalars())


@pytest.mark.parametrize("broker", ["amqp", "redis"])
def test_signed_events_run_and_forgeries_are_dead_lettered(
    pg_url: str,
    pg_engine: sa.Engine,
    amqp_url: str,
    redis_url: str,
    exchange_name: str,
    broker: str,
) -> None:
    url = amqp_url if broker == "amqp" else redis_url

    def handle(conn: sa.Connection, event: Event) -> None:
        conn.execute(
            sa.insert(events_app.handled).values(message_id=event.id, n=event.payload["n"])
        )

    queue = f"{exchange_name}.signed"
    handlers = QueueHandlers(queue, pg_engine, keyring=Keyring.from_text(KEYS))
    handlers.add("order.*", handle)
    consumer = EventConsumer(url, exchange_name, handlers)
    with kombu.Connection(url) as conn:
        handlers.declare(conn.channel(), exchange_name)
    stop = threading.Event()
    thread = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        settings = Settings(
            database_url=pg_url, broker_url=url, exchange=exchange_name, signing_keys=KEYS
        )
        with Session(pg_engine) as session, session.begin():
            for n in range(5):
                relay.enqueue(session, "order.created", {"n": n})
        assert relaying.drain(settings, budget_seconds=60).sent == 5
        wait_until(lambda: len(_handled(pg_engine)) >= 5, 60, "5 signed events handled")
        with kombu.Connection(url) as conn:
            producer = conn.Producer(exchange=kombu.Exchange(exchange_name, type="topic"))
            producer.publish(
                {"n": 100},
                routing_key="order.created",
                message_id="forged-1",
                headers={"outbox_id": 1, "event_type": "order.created"},
            )
            producer.publish(
                {"n": 101},
                routing_key="order.created",
                message_id="forged-2",
                headers={"relay_signature": "v1 k2026 " + "0" * 64},
            )
        wait_until(lambda: consumer.counts.get("dead", 0) >= 2, 60, "2 forgeries dead-lettered")
    finally:
        stop.set()
        thread.join(10)
    assert _handled(pg_engine) == [0, 1, 2, 3, 4]
    assert consumer.counts == {"done": 5, "dead": 2}
    with kombu.Connection(url) as conn:
        errors = sorted(d.error for d in peek(conn, queue, 10))
    assert errors == [
        "signature: bad signature (key 'k2026'): altered, or not from the relay",
        "signature: unsigned (no relay_signature header)",
    ]
