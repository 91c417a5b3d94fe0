"""A message the broker refuses alone (the row's fault, not the connection's) fails alone:
the AMQP publisher against a throw-away RabbitMQ node with ``max_message_size`` at 1 MiB, and
the shared broker for the refusals that need no reconfiguration (a task's missing exchange, a
conflicting queue declare)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import kombu
import pytest

from relay.publishers.amqp import AmqpPublisher
from relay.records import ClaimedEvent
from tests.support.broker import Collector, remove
from tests.support.rabbitserver import RabbitNode, throwaway_node

MAX_SIZE = 1_048_576
BIG = {"blob": "x" * (2 * MAX_SIZE)}
CREATED = datetime(2026, 12, 6, 6, 0, tzinfo=UTC)


def _event(i: int, payload: Any = None, **kw: Any) -> ClaimedEvent:
    fields: dict[str, Any] = {
        "id": i,
        "event_type": "order.created",
        "payload": {"n": i} if payload is None else payload,
        "headers": None,
        "ordering_key": None,
        "attempt": 1,
        "created_at": CREATED,
    }
    fields.update(kw)
    return ClaimedEvent(**fields)


def _task(i: int, exchange: str, queue: str, declare: dict[str, Any] | None) -> ClaimedEvent:
    """A Celery task row, as ``relay.celery.send_task`` writes it."""
    task = {
        "exchange": exchange,
        "routing_key": queue,
        "headers": {"task": "tasks.add", "id": str(uuid.uuid4()), "lang": "py"},
        "properties": {"correlation_id": str(uuid.uuid4())},
        "declare": declare,
    }
    return _event(i, [[1, 2], {}, {}], headers={"x-relay-task": task})


@pytest.fixture(scope="module")
def node() -> Iterator[RabbitNode]:
    with throwaway_node({"max_message_size": str(MAX_SIZE)}) as n:
        yield n


@pytest.fixture
def small_broker(node: RabbitNode, exchange_name: str) -> Iterator[tuple[str, Collector]]:
    collector = Collector(node.url, exchange_name)
    try:
        yield node.url, collector
    finally:
        collector.close()


def _arrived(collector: Collector, want: set[int], timeout: float = 30) -> set[int]:
    """The outbox ids that arrived, collected until ``want`` all did (duplicates of messages
    in flight when a channel closed are expected, so a count would stop early)."""
    deadline = time.monotonic() + timeout
    got: set[int] = set()
    while not want <= got and time.monotonic() < deadline:
        got = {m.outbox_id for m in collector.drain(len(collector.received) + 1, timeout=1)}
    return got


def _publish(url: str, exchange: str, events: list[ClaimedEvent]) -> Any:
    publisher = AmqpPublisher(url, exchange, confirm_timeout=10)
    try:
        return publisher.publish(events)
    finally:
        publisher.close()


@pytest.mark.timeout(120)
def test_an_oversized_message_fails_alone_with_the_brokers_reason(
    small_broker: tuple[str, Collector], exchange_name: str
) -> None:
    """A 2 MiB event among 500: a 406 closes the channel; the 499 others are confirmed and
    arrive, the big one is rejected with RabbitMQ's words, nothing is given back."""
    url, collector = small_broker
    events = [_event(i, BIG if i == 250 else None) for i in range(1, 501)]
    result = _publish(url, exchange_name, events)
    assert result.unavailable == []
    assert result.error is None
    assert sorted(e.id for e in result.confirmed) == [i for i in range(1, 501) if i != 250]
    ((refused, reason),) = result.rejected
    assert refused.id == 250
    assert reason.startswith("broker refused: PRECONDITION_FAILED - message size ")
    assert f"larger than configured max size {MAX_SIZE}" in reason
    good = {i for i in range(1, 501) if i != 250}
    assert _arrived(collector, good) == good


@pytest.mark.timeout(120)
def test_two_refusals_in_one_batch_fail_each_alone(
    small_broker: tuple[str, Collector], exchange_name: str
) -> None:
    """The isolation runs again for a second refused message in the remainder."""
    url, collector = small_broker
    big = {3, 70}
    events = [_event(i, BIG if i in big else None) for i in range(1, 101)]
    result = _publish(url, exchange_name, events)
    assert {e.id for e, _ in result.rejected} == big
    assert {e.id for e in result.confirmed} == set(range(1, 101)) - big
    assert result.unavailable == []
    assert _arrived(collector, set(range(1, 101)) - big) == set(range(1, 101)) - big


@pytest.mark.timeout(120)
def test_a_refused_keyed_row_withholds_the_rest_of_its_run(
    small_broker: tuple[str, Collector], exchange_name: str
) -> None:
    """Key "a" seq 1..5 with seq 3 too big: 1-2 confirmed, 3 rejected, 4-5 withheld (never
    published after it); key "b" goes on."""
    url, collector = small_broker
    keyed = [_event(10 + s, BIG if s == 3 else None, ordering_key="a", seq=s) for s in range(1, 6)]
    others = [_event(20 + s, ordering_key="b", seq=s) for s in range(1, 4)]
    events = [e for pair in zip(keyed, others + [None] * 2, strict=True) for e in pair if e]
    result = _publish(url, exchange_name, events)
    assert [e.id for e, _ in result.rejected] == [13]
    assert {e.id for e in result.withheld} == {14, 15}
    assert {e.id for e in result.confirmed} == {11, 12, 21, 22, 23}
    arrived = _arrived(collector, {11, 12, 21, 22, 23})
    assert arrived == {11, 12, 21, 22, 23}  # 14 and 15 never went out


@pytest.mark.timeout(60)
def test_a_task_routed_to_a_missing_exchange_fails_alone(
    amqp_url: str, exchange_name: str, collector: Collector
) -> None:
    """404 NOT_FOUND for a task row's own exchange (no declare): that row fails with the
    broker's reason, the events around it are confirmed."""
    missing = f"{exchange_name}.missing"
    events = [_event(1), _task(2, missing, "q", None), _event(3)]
    result = _publish(amqp_url, exchange_name, events)
    ((refused, reason),) = result.rejected
    assert refused.id == 2
    assert reason.startswith("broker refused: NOT_FOUND - no exchange")
    assert {e.id for e in result.confirmed} == {1, 3}
    assert result.unavailable == []
    assert _arrived(collector, {1, 3}) == {1, 3}


@pytest.mark.timeout(60)
def test_a_task_whose_queue_declare_conflicts_fails_alone(
    amqp_url: str, exchange_name: str, collector: Collector
) -> None:
    """A task row declaring a queue that exists with other arguments: 406 on queue.declare
    fails that row alone; the publishing channel is untouched and the rest is confirmed."""
    queue = f"{exchange_name}.conflict"
    with kombu.Connection(amqp_url) as conn:
        kombu.Queue(queue, durable=True, queue_arguments={"x-max-length": 10})(
            conn.default_channel
        ).declare()
    declare = {
        "queue": queue,
        "exchange": "",
        "exchange_type": "direct",
        "routing_key": queue,
        "durable": True,
        "arguments": None,
    }
    try:
        events = [_event(1), _task(2, "", queue, declare), _event(3), _event(4)]
        result = _publish(amqp_url, exchange_name, events)
    finally:
        remove(amqp_url, queues=[queue])
    ((refused, reason),) = result.rejected
    assert refused.id == 2
    assert reason.startswith("broker refused: PRECONDITION_FAILED - inequivalent arg")
    assert {e.id for e in result.confirmed} == {1, 3, 4}
    assert _arrived(collector, {1, 3, 4}) == {1, 3, 4}


@pytest.mark.timeout(60)
def test_the_relays_own_exchange_deleted_is_redeclared_not_blamed_on_a_row(
    amqp_url: str, exchange_name: str
) -> None:
    """A 404 for the relay's own exchange is the connection's fault: the publisher reconnects,
    which declares it again, and no row is refused for it (with no queue bound any more, the
    messages come back unroutable, as on any fresh exchange)."""
    publisher = AmqpPublisher(amqp_url, exchange_name, confirm_timeout=10)
    try:
        publisher.publish([_event(1)])  # connects: declares the exchange
        with kombu.Connection(amqp_url) as conn:
            kombu.Exchange(exchange_name, channel=conn.default_channel).delete()
        result = publisher.publish([_event(2), _event(3)])
    finally:
        publisher.close()
    assert result.unavailable == []
    assert sorted(e.id for e, _ in result.rejected) == [2, 3]
    assert all(reason.startswith("unroutable") for _, reason in result.rejected)


@pytest.mark.timeout(60)
def test_a_nacked_batch_fails_its_messages_and_the_next_goes_out_on_a_fresh_channel(
    amqp_url: str, exchange_name: str
) -> None:
    """A full queue with ``reject-publish`` nacks: each nacked message is a failed attempt
    (the contract), and the publisher renews its channel after nacks (a channel RabbitMQ once
    nacked for a quorum queue's election kept nacking), so the next batch is confirmed."""
    limited = {"x-max-length": 1, "x-overflow": "reject-publish"}
    collector = Collector(amqp_url, exchange_name, queue_arguments=limited)
    publisher = AmqpPublisher(amqp_url, exchange_name, confirm_timeout=10)
    try:
        publisher.connect()
        channel = publisher._channel
        first = publisher.publish([_event(1), _event(2), _event(3)])
        assert publisher._channel is not channel, "the channel was kept after nacks"
        assert [e.id for e in first.confirmed] == [1]
        assert sorted(e.id for e, _ in first.rejected) == [2, 3]
        assert {r for _, r in first.rejected} == {"broker refused the message (basic.nack)"}
        assert _arrived(collector, {1}) == {1}  # the queue has room again
        second = publisher.publish([_event(4)])
        assert [e.id for e in second.confirmed] == [4]
    finally:
        publisher.close()
        collector.close()
