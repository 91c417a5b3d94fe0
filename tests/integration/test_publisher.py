"""The AMQP publisher against RabbitMQ: the wire contract, confirms, unroutable, unreachable."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import amqp
import kombu
import pytest

from relay.exceptions import BrokerUnavailable
from relay.publishers import for_url
from relay.publishers.amqp import AmqpPublisher
from relay.records import ClaimedEvent
from tests.support.broker import Collector

CREATED = datetime(2026, 11, 29, 9, 30, 0, 123456, tzinfo=UTC)


def _event(i: int, event_type: str = "order.created", **kw: object) -> ClaimedEvent:
    fields: dict[str, object] = {
        "id": i,
        "event_type": event_type,
        "payload": {"n": i, "name": "Zoë"},
        "headers": {"traceparent": f"00-{i:032x}-01"},
        "ordering_key": None,
        "attempt": 1,
        "created_at": CREATED,
    }
    fields.update(kw)
    return ClaimedEvent(**fields)  # type: ignore[arg-type]


def test_message_on_the_wire_matches_the_contract(
    amqp_url: str, exchange_name: str, collector: Collector
) -> None:
    """Body JSON, routing key, message_id = the event id, persistent, contract headers and the
    CloudEvents attributes plus the row's."""
    event_id = "4f1c2a9e-8b7d-4e6f-a1b2-c3d4e5f60718"
    publisher = for_url(amqp_url, exchange_name)
    try:
        result = publisher.publish([_event(7, attempt=3, event_id=event_id, source="/shop")])
    finally:
        publisher.close()
    assert [e.id for e in result.confirmed] == [7]
    (msg,) = collector.drain(1, timeout=10)
    assert msg.body == {"n": 7, "name": "Zoë"}
    assert msg.routing_key == "order.created"
    assert msg.message_id == event_id
    assert msg.properties["delivery_mode"] == 2
    assert msg.properties["content_type"] == "application/json"
    assert msg.headers == {
        "traceparent": f"00-{7:032x}-01",
        "outbox_id": 7,
        "event_type": "order.created",
        "attempt": 3,
        "created_at": CREATED.isoformat(),
        "cloudEvents:specversion": "1.0",
        "cloudEvents:id": event_id,
        "cloudEvents:source": "/shop",
        "cloudEvents:type": "order.created",
        "cloudEvents:time": CREATED.isoformat(),
    }
    assert msg.delivery_info["exchange"] == exchange_name


def test_exchange_is_declared_durable_topic(amqp_url: str, exchange_name: str) -> None:
    """The publisher declares the exchange itself, durable and topic: re-declaring it so agrees,
    re-declaring it with another type or durability is refused by the broker."""
    publisher = for_url(amqp_url, exchange_name)
    try:
        assert publisher.publish([]).confirmed == []
        # Nothing bound: the message is returned, but the exchange now exists.
        assert [e.id for e, _ in publisher.publish([_event(1)]).rejected] == [1]
        with kombu.Connection(amqp_url) as conn:
            kombu.Exchange(exchange_name, type="topic", durable=True)(conn.channel()).declare()
            for other in ({"type": "direct", "durable": True}, {"type": "topic", "durable": False}):
                with pytest.raises(amqp.exceptions.PreconditionFailed):
                    kombu.Exchange(exchange_name, **other)(conn.channel()).declare()
            kombu.Exchange(exchange_name)(conn.channel()).delete()
    finally:
        publisher.close()


def test_a_batch_is_confirmed_as_a_whole(
    amqp_url: str, exchange_name: str, collector: Collector
) -> None:
    """500 events in one batch: all confirmed, all delivered once, in order."""
    publisher = for_url(amqp_url, exchange_name)
    try:
        result = publisher.publish([_event(i) for i in range(1, 501)])
    finally:
        publisher.close()
    assert len(result.confirmed) == 500
    assert result.rejected == []
    assert result.unavailable == []
    received = collector.drain(500, timeout=20, settle=0.2)
    assert [m.message_id for m in received] == [str(i) for i in range(1, 501)]


def test_unroutable_event_is_rejected_not_confirmed(amqp_url: str, exchange_name: str) -> None:
    """With no queue bound to its routing key, the mandatory publish returns: a failed attempt,
    while routable events of the same batch are confirmed."""
    collector = Collector(amqp_url, exchange_name, binding_key="good.#")
    publisher = for_url(amqp_url, exchange_name)
    try:
        result = publisher.publish(
            [_event(1, "good.a"), _event(2, "nobody.listens"), _event(3, "good.b")]
        )
        assert [e.id for e in result.confirmed] == [1, 3]
        ((rejected, reason),) = result.rejected
        assert rejected.id == 2
        assert "unroutable" in reason
        assert "nobody.listens" in reason
        assert [m.message_id for m in collector.drain(2, timeout=10, settle=0.2)] == ["1", "3"]
    finally:
        publisher.close()
        collector.close()


def test_unreachable_broker_reports_unavailable_without_raising(exchange_name: str) -> None:
    """A broker that refuses connections makes every event `unavailable` with a reason."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    publisher = for_url(
        f"amqp://guest:s3cret-pw@127.0.0.1:{port}//", exchange_name, confirm_timeout=2
    )
    result = publisher.publish([_event(1), _event(2)])
    assert [e.id for e in result.unavailable] == [1, 2]
    assert result.confirmed == []
    assert isinstance(result.error, BrokerUnavailable)
    assert result.error.retryable
    assert result.error.__cause__ is not None  # the Kombu error it translates
    assert "s3cret-pw" not in str(result.error)


def test_connect_opens_the_connection_before_any_publish(amqp_url: str, exchange_name: str) -> None:
    """``connect()`` connects and declares the exchange at once (a passive declare finds it);
    against a port nobody listens on it raises BrokerUnavailable, with the password
    redacted."""
    publisher = for_url(amqp_url, exchange_name)
    assert isinstance(publisher, AmqpPublisher)
    try:
        publisher.connect()
        with kombu.Connection(amqp_url) as conn:
            kombu.Exchange(exchange_name, type="topic", durable=True)(conn.channel()).declare(
                passive=True
            )
            kombu.Exchange(exchange_name)(conn.channel()).delete()
    finally:
        publisher.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused = AmqpPublisher(f"amqp://guest:s3cret-pw@127.0.0.1:{port}//", exchange_name)
    with pytest.raises(BrokerUnavailable) as caught:
        refused.connect()
    assert "s3cret-pw" not in str(caught.value)


def test_publisher_reconnects_after_the_connection_is_closed(
    amqp_url: str, exchange_name: str, collector: Collector
) -> None:
    """A connection killed between batches is replaced on the next publish; nothing is lost."""
    publisher = for_url(amqp_url, exchange_name)
    assert isinstance(publisher, AmqpPublisher)
    try:
        assert len(publisher.publish([_event(1)]).confirmed) == 1
        assert publisher._conn is not None
        publisher._conn.connection.sock.close()  # the socket dies under the publisher
        result = publisher.publish([_event(2), _event(3)])
        assert [e.id for e in result.confirmed] == [2, 3]
    finally:
        publisher.close()
    ids = {m.message_id for m in collector.drain(3, timeout=10)}
    assert ids == {"1", "2", "3"}


def test_bodies_over_frame_max_arrive_whole_between_small_ones(
    amqp_url: str, exchange_name: str, collector: Collector
) -> None:
    """A 600 kB payload (several frames at RabbitMQ's frame_max) and small ones in one batch:
    all confirmed, each delivered intact."""
    big = {"blob": "é" * 300_000}
    events = [_event(1), _event(2, payload=big), _event(3)]
    publisher = for_url(amqp_url, exchange_name)
    try:
        result = publisher.publish(events)
    finally:
        publisher.close()
    assert sorted(e.id for e in result.confirmed) == [1, 2, 3]  # confirms may come out of order
    received = collector.drain(3, timeout=20, settle=0.2)
    assert [m.message_id for m in received] == ["1", "2", "3"]
    assert received[1].body == big
