"""Publishing events to Redis (RELAY_EVENTS_URL=redis://…): Kombu's format, batched, routed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import kombu
import pytest
import redis

from relay.publishers import Publisher, for_url, message
from relay.records import ClaimedEvent
from tests.support.broker import Collector


def _event(n: int, event_type: str = "order.created") -> ClaimedEvent:
    return ClaimedEvent(
        id=n,
        event_type=event_type,
        payload={"n": n, "text": "héllo"},
        headers={"tenant": "t1"},
        ordering_key=None,
        attempt=1,
        created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    )


@pytest.fixture
def publisher(redis_url: str, exchange_name: str) -> Iterator[Publisher]:
    p = for_url(redis_url, exchange_name)
    yield p
    p.close()


@pytest.fixture
def redis_collector(redis_url: str, exchange_name: str) -> Iterator[Collector]:
    c = Collector(redis_url, exchange_name, binding_key="order.*")
    yield c
    c.close()


def _stored(redis_url: str, queue: str) -> list[dict[str, Any]]:
    client = redis.Redis.from_url(redis_url)
    try:
        return [json.loads(raw) for raw in client.lrange(queue, 0, -1)]
    finally:
        client.close()


def test_batch_is_stored_exactly_as_kombu_would_store_it(
    redis_url: str, exchange_name: str, publisher: Publisher
) -> None:
    """The pipelined LPUSH writes the same JSON a Kombu Producer.publish writes, but for the
    per-channel delivery tag."""
    queue = f"{exchange_name}.fmt"
    with kombu.Connection(redis_url) as conn:
        exchange = kombu.Exchange(exchange_name, type="topic", durable=True)
        bound = kombu.Queue(queue, exchange, routing_key="order.*", durable=True)(conn.channel())
        bound.declare()
        try:
            event = _event(7)
            msg = message.build(event)
            kombu.Producer(conn.channel(), exchange=exchange).publish(
                msg.body, routing_key=msg.routing_key, **message.properties(msg)
            )
            assert publisher.publish([event]).confirmed == [event]
            by_kombu, by_relay = _stored(redis_url, queue)
        finally:
            bound.delete()
    for raw in (by_kombu, by_relay):
        raw["properties"].pop("delivery_tag")
    assert by_relay == by_kombu


def test_consumer_receives_the_contract_and_unbound_types_are_refused(
    publisher: Publisher, redis_collector: Collector
) -> None:
    """A Kombu consumer gets body, routing key, message_id and headers of each event; an event
    type no queue is bound to is refused as unroutable, not dropped silently."""
    events = [_event(n) for n in range(1, 2501)] + [_event(9999, "invoice.paid")]
    result = publisher.publish(events)
    assert [e.id for e in result.confirmed] == list(range(1, 2501))
    assert [(e.id, why.split(":")[0]) for e, why in result.rejected] == [(9999, "unroutable")]
    got = redis_collector.drain(2500, timeout=30)
    assert sorted(int(m.message_id) for m in got) == list(range(1, 2501))
    first = next(m for m in got if m.message_id == "1")
    assert first.body == {"n": 1, "text": "héllo"}
    assert first.routing_key == "order.created"
    assert first.headers["outbox_id"] == 1
    assert first.headers["tenant"] == "t1"
    assert first.properties["delivery_mode"] == message.PERSISTENT


def test_unreachable_redis_gives_the_batch_back(exchange_name: str) -> None:
    """A Redis that cannot be reached leaves every event unavailable (their attempt is given
    back), never confirmed."""
    p = for_url("redis://127.0.0.1:9/0", exchange_name, confirm_timeout=2)
    try:
        result = p.publish([_event(1)])
    finally:
        p.close()
    assert result.confirmed == []
    assert [e.id for e in result.unavailable] == [1]
    assert result.error is not None
