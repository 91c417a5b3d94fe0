"""relay.consume.consumer.EventConsumer, the plain-Kombu way to run event handlers (no Celery),
against real RabbitMQ and PostgreSQL: redelivered duplicates take effect once, bindings come
first."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import kombu
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.config import Settings
from relay.consume.consumer import Event, EventConsumer, QueueHandlers
from relay.store.engine import create_engine
from tests.support import events_app, relaying
from tests.support.env import wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def pg_engine(pg_url: str) -> Iterator[sa.Engine]:
    engine = create_engine(pg_url)
    events_app.metadata.create_all(engine)
    yield engine
    engine.dispose()


def _handled(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(events_app.handled.c.message_id)).scalars())


def test_plain_kombu_consumer_takes_each_event_once(
    pg_url: str, pg_engine: sa.Engine, amqp_url: str, exchange_name: str
) -> None:
    """500 events relayed, then 50 of them published again by hand (a redelivery's twin): the
    handler's row exists once per event and the consumer counted the 50 duplicates."""

    def handle(conn: sa.Connection, event: Event) -> None:
        assert event.event_type == "order.created"
        assert event.attempt == 1
        conn.execute(
            sa.insert(events_app.handled).values(message_id=event.id, n=event.payload["n"])
        )

    handlers = QueueHandlers(f"{exchange_name}.consumer", pg_engine)
    handlers.add("order.*", handle)
    consumer = EventConsumer(amqp_url, exchange_name, handlers)
    stop = threading.Event()
    with kombu.Connection(amqp_url) as conn:
        handlers.declare(conn.channel(), exchange_name)  # bound before the first publish
    thread = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        settings = Settings(database_url=pg_url, broker_url=amqp_url, exchange=exchange_name)
        with Session(pg_engine) as session, session.begin():
            ids = [relay.enqueue(session, "order.created", {"n": n}) for n in range(500)]
        assert relaying.drain(settings, budget_seconds=60).sent == 500
        wait_until(lambda: len(_handled(pg_engine)) >= 500, 60, "500 handled")
        with pg_engine.connect() as conn:
            event_ids = dict(conn.execute(sa.text("SELECT id, event_id FROM outbox")).all())
        with kombu.Connection(amqp_url) as conn:
            producer = conn.Producer(exchange=kombu.Exchange(exchange_name, type="topic"))
            for outbox_id in ids[:50]:
                producer.publish(
                    {"n": -1},
                    routing_key="order.created",
                    message_id=event_ids[outbox_id],
                    headers={"attempt": 1},
                )
        wait_until(lambda: consumer.counts.get("duplicate", 0) >= 50, 60, "50 duplicates seen")
    finally:
        stop.set()
        thread.join(10)
    assert sorted(_handled(pg_engine)) == sorted(event_ids[i] for i in ids)
    assert consumer.counts == {"done": 500, "duplicate": 50}
