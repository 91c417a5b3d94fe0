"""Replaying sent events to one queue (``relay replay``), against each database and RabbitMQ,
and Redis as the events transport."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa
from prometheus_client import REGISTRY
from sqlalchemy.orm import Session

import relay
from relay.config import Settings
from relay.exceptions import ReplayRefused, SelectorError
from relay.publishers.message import REPLAY_HEADER
from relay.replays.replayer import ReplayReport, replay_selected
from relay.store.operations.filters import EventFilter
from relay.store.operations.store import OperationsStore
from relay.store.schema.eventids import default_source
from tests.support import bad_rows
from tests.support.broker import Collector, Received
from tests.support.proxy import running_proxy
from tests.support.relaying import drain
from tests.support.rows import count_by_status, rows


@pytest.fixture
def target(amqp_url: str, exchange_name: str) -> Iterator[Collector]:
    """The consumer's queue a replay is aimed at: bound to the exchange for ``order.*``."""
    c = Collector(amqp_url, exchange_name, binding_key="order.*", queue=exchange_name + ".consumer")
    yield c
    c.close()


def _history(engine: sa.Engine) -> dict[str, list[int]]:
    """Orders on two keys, interleaved, and unrelated events; every one committed apart, so
    ids follow each key's order. Returns ids by kind."""
    made: dict[str, list[int]] = {"k1": [], "k2": [], "user": []}
    for i in range(12):
        with Session(engine) as session, session.begin():
            key = "k1" if i % 3 else "k2"
            made[key].append(
                relay.enqueue(session, "order.created", {"i": i, "key": key}, ordering_key=key)
            )
            made["user"].append(relay.enqueue(session, "user.seen", {"i": i}))
    return made


def _send_all(engine: sa.Engine, settings: Settings) -> None:
    """Relay until every row is sent (a key's rows may take a drain each)."""
    for _ in range(30):
        drain(settings)
        if set(count_by_status(engine)) == {"sent"}:
            return
    raise AssertionError(f"rows left unsent: {count_by_status(engine)}")


def _replayed_total(engine: sa.Engine) -> float:
    """``relay_events_replayed_total`` of this process for the outbox of ``engine``."""
    source = default_source(engine.url)
    value = REGISTRY.get_sample_value("relay_events_replayed_total", {"source": source})
    return value or 0.0


def _by_id(received: list[Received]) -> dict[int, Received]:
    return {m.outbox_id: m for m in received}


def _sent_history(
    engine: sa.Engine, settings: Settings, collector: Collector, target: Collector
) -> tuple[dict[str, list[int]], dict[int, Received]]:
    """The history sent live; the messages as the consumer's queue first received them."""
    made = _history(engine)
    _send_all(engine, settings)
    live = list(collector.drain(24))
    first = list(target.drain(12))
    assert len(live) == 24
    assert len(first) == 12
    collector.received.clear()
    target.received.clear()
    return made, _by_id(first)


def test_replay_sends_the_selected_sent_events_to_that_queue_alone(
    engine: sa.Engine, settings: Settings, collector: Collector, target: Collector
) -> None:
    """Given a sent history on two keys and another type, when the order events are replayed to
    the consumer's queue: each arrives there once, the original message (body, message_id,
    contract headers) plus the replay header, in id order per key; the queue bound to the
    same exchange with ``#`` gets no copy; the rows are unchanged."""
    made, originals = _sent_history(engine, settings, collector, target)
    before = rows(engine)

    dry = replay_selected(
        settings, EventFilter(event_type="order.*"), to_queue=target.queue_name, dry_run=True
    )
    assert (dry.matched, dry.sent, dry.dry_run) == (12, 0, True)
    assert target.drain(1, timeout=0.5) == []

    counted = _replayed_total(engine)
    report = relay.replay(target.queue_name, event_type="order.*", settings=settings)

    assert (report.matched, report.sent, report.complete) == (12, 12, True)
    got = target.drain(12, settle=0.5)
    assert sorted(m.outbox_id for m in got) == sorted(made["k1"] + made["k2"])
    for m in got:
        original = originals[m.outbox_id]
        assert m.headers.pop(REPLAY_HEADER) == report.replay_id
        assert (m.message_id, m.raw_body, m.headers) == (
            original.message_id,
            original.raw_body,
            original.headers,
        )
        assert m.delivery_info["exchange"] == ""
        assert m.routing_key == target.queue_name
    for key in ("k1", "k2"):
        assert [m.outbox_id for m in got if m.body["key"] == key] == made[key]
    assert collector.drain(1, timeout=0.5) == []
    assert rows(engine) == before
    assert report.last_id == max(made["k1"] + made["k2"])
    assert _replayed_total(engine) == counted + 12


def test_replay_by_key_ids_and_resume_point(
    engine: sa.Engine, settings: Settings, collector: Collector, target: Collector
) -> None:
    """A key selects its events; ids select those; ``after`` skips up to an id; a replay with
    no selector is refused; a row not sent is never replayed."""
    made, _ = _sent_history(engine, settings, collector, target)
    with Session(engine) as session, session.begin():
        pending = relay.enqueue(session, "order.created", {"late": True}, ordering_key="k1")

    with pytest.raises(SelectorError):
        replay_selected(settings, EventFilter(), to_queue=target.queue_name)
    by_key = replay_selected(
        settings, EventFilter(key="k1"), to_queue=target.queue_name, after=made["k1"][2]
    )
    assert [m.outbox_id for m in target.drain(by_key.sent, settle=0.3)] == made["k1"][3:]
    target.received.clear()
    chosen = (made["k2"][0], made["user"][1], pending)
    by_ids = replay_selected(settings, EventFilter(ids=chosen), to_queue=target.queue_name)
    assert by_ids.matched == 2
    assert sorted(m.outbox_id for m in target.drain(2, settle=0.3)) == sorted(chosen[:2])


def test_unknown_queue_is_refused_and_nothing_is_sent(
    engine: sa.Engine, settings: Settings, collector: Collector, target: Collector
) -> None:
    """A queue that does not exist is refused before anything is published, dry run or not."""
    _sent_history(engine, settings, collector, target)
    for dry_run in (True, False):
        with pytest.raises(ReplayRefused, match=r"no queue 'no\.such\.queue'"):
            replay_selected(
                settings, EventFilter(all=True), to_queue="no.such.queue", dry_run=dry_run
            )
    assert collector.drain(1, timeout=0.5) == []
    assert target.drain(1, timeout=0.1) == []
    assert OperationsStore(engine).audit_log() == []


def test_deleted_at_send_means_nothing_to_replay(settings: Settings, target: Collector) -> None:
    """With RELAY_DELETE_ON_SEND there are no sent rows: the replay says so."""
    deleting = dataclasses.replace(settings, delete_on_send=True)
    with pytest.raises(ReplayRefused, match="nothing to replay"):
        replay_selected(deleting, EventFilter(all=True), to_queue=target.queue_name)


def test_a_replay_cut_off_resumes_after_its_last_confirmed_id_without_duplicates(
    engine: sa.Engine, settings: Settings, collector: Collector, target: Collector, amqp_url: str
) -> None:
    """Given a replay whose broker connection is cut after its second window, the report names
    the last id confirmed and the audit records it; resuming after that id delivers the rest:
    every selected event exactly once."""
    made, _ = _sent_history(engine, settings, collector, target)
    wanted = sorted(made["k1"] + made["k2"])
    parts = urlsplit(amqp_url)
    with running_proxy(parts.hostname or "127.0.0.1", parts.port or 5672) as proxy:
        through = dataclasses.replace(settings, events_url=proxy.url_for(amqp_url))
        windows: list[int] = []

        def cut_after_two(report: ReplayReport) -> None:
            windows.append(report.sent)
            if len(windows) == 2:
                proxy.cut()

        # rate 100 a second: windows of 5 events
        first = replay_selected(
            through,
            EventFilter(event_type="order.*"),
            to_queue=target.queue_name,
            rate=100,
            on_window=cut_after_two,
        )
    assert not first.complete
    assert first.error
    assert (first.sent, first.last_id) == (10, wanted[9])
    audit = OperationsStore(engine).audit_log()
    assert audit[0]["action"] == "replay"
    assert audit[0]["changed"] == 10
    assert audit[0]["selector"]["last_id"] == wanted[9]

    rest = replay_selected(
        settings,
        EventFilter(event_type="order.*"),
        to_queue=target.queue_name,
        after=first.resume_after,
    )
    assert (rest.matched, rest.sent, rest.complete) == (2, 2, True)
    assert [m.outbox_id for m in target.drain(12, settle=0.5)] == wanted
    assert collector.drain(1, timeout=0.3) == []


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_redis_replay_reaches_the_bound_queue_alone(
    engine: sa.Engine, settings: Settings, redis_url: str, exchange_name: str
) -> None:
    """On Redis the queue a consumer bound to the relay's exchange is addressed alone (the
    virtual default exchange); another bound queue sees no copy; an unknown queue is refused."""
    on_redis = dataclasses.replace(settings, events_url=redis_url)
    consumer = Collector(redis_url, exchange_name, "order.*", queue=exchange_name + ".consumer")
    everything = Collector(redis_url, exchange_name, "#")
    try:
        made = _history(engine)
        _send_all(engine, on_redis)
        assert len(consumer.drain(12)) == 12
        assert len(everything.drain(24)) == 24
        consumer.received.clear()
        everything.received.clear()
        with pytest.raises(ReplayRefused, match="no queue"):
            replay_selected(on_redis, EventFilter(all=True), to_queue=exchange_name + ".nobody")

        report = replay_selected(on_redis, EventFilter(key="k2"), to_queue=consumer.queue_name)

        assert (report.sent, report.complete) == (len(made["k2"]), True)
        got = consumer.drain(report.sent, settle=0.5)
        assert [m.outbox_id for m in got] == made["k2"]
        assert all(m.headers[REPLAY_HEADER] == report.replay_id for m in got)
        assert everything.drain(1, timeout=0.5) == []
    finally:
        consumer.close()
        everything.close()


def test_a_sent_row_that_no_message_can_carry_stops_the_replay_there_with_why(
    engine: sa.Engine, settings: Settings, collector: Collector, target: Collector
) -> None:
    """Given a sent row edited by hand into a 5,001-digit payload among sent orders: the replay
    publishes the orders before it, stops at it naming the row and why (nothing is published
    for it), and a replay after it delivers the rest."""
    made, _ = _sent_history(engine, settings, collector, target)
    edited = bad_rows.BadRow("edited", '{"n": 1' + "0" * 5000 + "}", None, "", event_type="order.x")
    bad = bad_rows.insert(engine, edited)
    with Session(engine) as session, session.begin():
        later = relay.enqueue(session, "order.created", {"late": True})
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE outbox SET status = 'sent', attempt = 1 WHERE id IN (:a, :b)"),
            {"a": bad, "b": later},
        )
    before = sorted(made["k1"] + made["k2"])
    first = replay_selected(settings, EventFilter(event_type="order.*"), to_queue=target.queue_name)
    assert not first.complete
    assert first.error == (
        f"event {bad} cannot be replayed: payload: an integer of 5,001 digits, more than the "
        f"4,300 Python converts (store it as a string) (a replay after {bad} skips it)"
    )
    assert (first.sent, first.last_id) == (len(before), before[-1])
    assert [m.outbox_id for m in target.drain(len(before), settle=0.5)] == before
    target.received.clear()
    rest = replay_selected(
        settings, EventFilter(event_type="order.*"), to_queue=target.queue_name, after=bad
    )
    assert (rest.matched, rest.sent, rest.complete) == (1, 1, True)
    assert [m.outbox_id for m in target.drain(1, settle=0.3)] == [later]
