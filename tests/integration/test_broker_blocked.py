"""A broker that blocks publishing (``connection.blocked``: a memory alarm on a throw-away
RabbitMQ node) pauses the AMQP publisher, which writes nothing, gives its batch back quickly
and keeps the connection to hear the unblock; every call on the connection has a deadline;
a failover URL is honoured."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from relay.exceptions import BrokerBlocked
from relay.publishers import liveness
from relay.publishers.amqp import AmqpPublisher
from relay.records import ClaimedEvent
from tests.support.broker import Collector
from tests.support.rabbitserver import RabbitNode, throwaway_node
from tools.pgserver import free_port

CREATED = datetime(2026, 12, 6, 6, 0, tzinfo=UTC)


def _event(i: int) -> ClaimedEvent:
    return ClaimedEvent(i, "order.created", {"n": i}, None, None, 1, CREATED)


@pytest.fixture(scope="module")
def node() -> Iterator[RabbitNode]:
    with throwaway_node() as n:
        yield n


def test_connection_options_bound_every_call() -> None:
    """Connect, read and write timeouts and the heartbeat follow the confirm timeout; a write
    stall is cut at 5 s even when confirms may take longer."""
    short = liveness.connection_options(2.0)
    assert short["connect_timeout"] == 2.0
    assert short["heartbeat"] == 2
    assert short["transport_options"] == {"read_timeout": 2.0, "write_timeout": 2.0}
    long = liveness.connection_options(30.0)
    assert long["heartbeat"] == 30
    assert long["transport_options"]["write_timeout"] == 5.0


@pytest.mark.timeout(120)
def test_a_blocked_broker_pauses_publishing_and_the_unblock_resumes_it(
    node: RabbitNode, exchange_name: str
) -> None:
    """Memory alarm: the batch in hand is given back as BrokerBlocked (no attempt, no
    reconnect) with the broker's reason, the next one without a write, both well inside the
    confirm timeout; the gauge hook hears blocked then unblocked, and publishing resumes on
    the same connection."""
    collector = Collector(node.url, exchange_name)
    heard: list[str | None] = []
    publisher = AmqpPublisher(node.url, exchange_name, confirm_timeout=10, on_blocked=heard.append)
    try:
        assert [e.id for e in publisher.publish([_event(1)]).confirmed] == [1]
        conn = publisher._conn
        node.memory_alarm(True)
        try:
            started = time.monotonic()
            first = publisher.publish([_event(2), _event(3)])
            second = publisher.publish([_event(4)])
            took = time.monotonic() - started
        finally:
            node.memory_alarm(False)
        assert isinstance(first.error, BrokerBlocked), first.error
        assert sorted(e.id for e in first.unavailable) == [2, 3]
        assert isinstance(second.error, BrokerBlocked)
        assert [e.id for e in second.unavailable] == [4]
        assert took < 10, f"blocked publishes took {took:.1f}s: longer than a confirm timeout"
        assert heard, "the gauge hook never heard of the block"
        assert "memory" in str(heard[0]), heard
        assert publisher._conn is conn, "the blocked connection was dropped"
        resumed = publisher.publish([_event(5)])
        assert [e.id for e in resumed.confirmed] == [5]
        assert heard[-1] is None
        arrived = {m.outbox_id for m in collector.drain(5, timeout=20)}
        assert {1, 5} <= arrived
    finally:
        publisher.close()
        collector.close()


@pytest.mark.timeout(60)
def test_a_failover_url_connects_to_the_first_node_that_answers_and_stays_there(
    amqp_url: str, exchange_name: str, collector: Collector
) -> None:
    """``amqp://dead;amqp://live`` (Kombu's failover syntax): the publisher skips the refused
    node without a pause, publishes on the live one, and reconnects there first."""
    dead = f"amqp://guest:guest@127.0.0.1:{free_port()}//"
    publisher = AmqpPublisher(f"{dead};{amqp_url}", exchange_name, confirm_timeout=5)
    try:
        started = time.monotonic()
        assert [e.id for e in publisher.publish([_event(1)]).confirmed] == [1]
        assert time.monotonic() - started < 5, "the refused node cost a retry pause"
        publisher.close()
        assert [e.id for e in publisher.publish([_event(2)]).confirmed] == [2]
        assert publisher._node == 1
    finally:
        publisher.close()
    assert {m.outbox_id for m in collector.drain(2, timeout=10)} == {1, 2}
