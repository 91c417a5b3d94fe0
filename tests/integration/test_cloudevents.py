"""A relayed message is a CloudEvent (binary content mode of the CloudEvents AMQP binding): the
CloudEvents Python SDK reads it, validated, from RabbitMQ and from Redis."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import sqlalchemy as sa
from cloudevents.core.bindings import amqp
from cloudevents.core.v1.event import CloudEvent
from sqlalchemy.orm import Session

import relay
from relay.config import Settings
from relay.store.engine import create_engine
from tests.support import relaying
from tests.support.broker import Collector, Received


def _cloudevent(received: Received) -> CloudEvent:
    """What an SDK's AMQP binding does: AMQP 0-9-1 headers are the application-properties,
    ``content_type`` the content-type property (RabbitMQ maps them so for AMQP 1.0 clients)."""
    body = received.raw_body  # Kombu hands a utf-8 body over decoded
    message = amqp.AMQPMessage(
        properties={"content-type": received.content_type},
        application_properties=received.headers,
        application_data=body.encode() if isinstance(body, str) else body,
    )
    return amqp.from_binary_event(message)


def _relay_one(settings: Settings, payload: dict[str, Any]) -> int:
    engine = create_engine(settings.database_url)
    try:
        with Session(engine) as session, session.begin():
            outbox_id = relay.enqueue(session, "order.created", payload)
        with engine.connect() as conn:
            event_id = conn.execute(
                sa.text("SELECT event_id FROM outbox WHERE id = :id"), {"id": outbox_id}
            ).scalar_one()
    finally:
        engine.dispose()
    assert relaying.drain(settings).sent == 1
    assert isinstance(event_id, str)
    return outbox_id


def _check(received: Received, source: str) -> None:
    event = _cloudevent(received)
    assert event.get_specversion() == "1.0"
    assert event.get_id() == received.message_id == received.headers["cloudEvents:id"]
    assert event.get_source() == source
    assert event.get_type() == "order.created"
    assert event.get_datacontenttype() == "application/json"
    assert event.get_time() is not None
    assert event.get_time().utcoffset() is not None
    assert event.get_data() == {"total": 3, "note": "héllo"}


def test_the_cloudevents_sdk_reads_a_relayed_rabbitmq_message(
    settings: Settings, collector: Collector
) -> None:
    """On each database: the SDK validates the message (required attributes, specversion 1.0)
    and reads id = message_id = the row's event id, source = RELAY_SOURCE, type, time, data."""
    settings = dataclasses.replace(settings, source="/shop/orders")
    outbox_id = _relay_one(settings, {"total": 3, "note": "héllo"})
    [received] = collector.drain(1)
    assert received.headers["outbox_id"] == outbox_id
    _check(received, "/shop/orders")


def test_a_message_without_its_specversion_is_refused_by_the_sdk() -> None:
    """The SDK's check the test above relies on: without ``specversion`` it refuses."""
    message = amqp.AMQPMessage(
        properties={"content-type": "application/json"},
        application_properties={"cloudEvents:id": "1", "cloudEvents:type": "t"},
        application_data=b"{}",
    )
    with pytest.raises(Exception, match=r"source|specversion"):
        amqp.from_binary_event(message)


def test_the_cloudevents_sdk_reads_a_relayed_redis_message(
    pg_url: str, redis_url: str, exchange_name: str
) -> None:
    """The same attributes travel on Redis; unset RELAY_SOURCE names the database, not its
    credentials."""
    settings = Settings(database_url=pg_url, broker_url=redis_url, exchange=exchange_name)
    collector = Collector(redis_url, exchange_name)
    try:
        _relay_one(settings, {"total": 3, "note": "héllo"})
        [received] = collector.drain(1)
    finally:
        collector.close()
    url = sa.make_url(pg_url)
    source = received.headers["cloudEvents:source"]
    assert source.startswith("/relay/postgresql/")
    assert source.endswith(f"/{url.database}")
    assert "@" not in source  # no user (the unit test checks the password too)
    _check(received, source)
