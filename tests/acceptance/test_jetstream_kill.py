"""Exactly once into the stream (issue 50): relays SIGKILLed mid-batch publish their batches
again after the lease, and JetStream drops every republish by its ``Nats-Msg-Id``."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa

from relay.store.schema.tables import outbox
from tests.support import celery_fleet
from tests.support.env import relay_env, wait_until
from tests.support.fleet import (
    Fleet,
    SteadyProducer,
    drained,
    enqueue_committed,
    fleet_env,
    holders,
    report,
)
from tests.support.jetstream import Stream
from tests.support.proxy import TcpProxy, running_proxy

LEASE = 5
KILLS = 4
#: Kills at most, while no kill has yet left rows leased by the dead relay.
MOST_KILLS = 8
#: Added to every chunk between the relays and NATS, so that a relay holds each batch for a
#: tenth of a second or more: a kill then catches one in flight, however loaded the machine.
NATS_LATENCY = 0.05


def _event_ids(engine: sa.Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(outbox.c.event_id, outbox.c.status)).all())


def _reclaimed(engine: sa.Engine) -> int:
    """Rows claimed more than once: held by a killed relay, claimed again after its lease."""
    with engine.connect() as conn:
        query = sa.select(sa.func.count()).where(outbox.c.attempt > 1)
        return int(conn.execute(query).scalar_one())


def _through(proxy: TcpProxy, pg_url: str, jetstream: Stream, **settings: object) -> dict[str, str]:
    """The environment of relays that reach ``jetstream`` through ``proxy``."""
    nats = proxy.url_for(jetstream.url)
    return fleet_env(
        pg_url, nats, jetstream.exchange, events_url=nats, nats_stream=jetstream.name, **settings
    )


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sigkilled_relays_leave_each_event_exactly_once_in_the_stream(
    pg_url: str, pg_engine: sa.Engine, jetstream: Stream, tmp_path: Path
) -> None:
    """Two `relay dispatch --loop` reaching NATS with 50 ms of latency, 5,000 events written
    over 10 s, a relay caught holding a batch SIGKILLed and replaced every 1.5 s or more, four
    times (more, up to eight, until a kill leaves rows leased by the dead relay), lease 5 s:
    the stream holds exactly 5,000 messages, one per row, each under its row's event id;
    every row sent; no relay exits on its own."""
    with running_proxy("127.0.0.1", urlsplit(jetstream.url).port or 4222) as proxy:
        proxy.latency(NATS_LATENCY)
        fleet = Fleet(_through(proxy, pg_url, jetstream, lease_seconds=LEASE), tmp_path)
        producer = SteadyProducer(pg_engine, total=5000, seconds=10.0)
        killed: list[str] = []
        stranded = 0  # rows the killed relays still held when they died
        try:
            fleet.start(2)
            producer.start()
            while not producer.done and len(killed) < MOST_KILLS:
                if len(killed) >= KILLS and stranded:
                    break
                fleet.assert_alive()
                held = holders(pg_engine)
                victim = next((w for w in map(fleet.by_pid, held) if w is not None), None)
                if victim is None:
                    time.sleep(0.02)  # polling for a relay caught holding a batch
                    continue
                fleet.kill(victim)  # returns once it is dead: what it held stays leased
                killed.append(victim.name)
                stranded += holders(pg_engine)[victim.pid]
                fleet.start(1)
                time.sleep(1.5)  # pacing between faults, not synchronisation
            committed = producer.join()
            wait_until(lambda: drained(pg_engine), 90, "the fleet to drain after the last kill")
            fleet.assert_alive()
            rows = _event_ids(pg_engine)
            reclaimed = _reclaimed(pg_engine)
            stored = jetstream.messages()
            codes = fleet.stop()
        finally:
            fleet.stop()
    assert len(committed) == 5000
    assert len(killed) >= KILLS, f"only {len(killed)} relays were caught holding a batch"
    assert stranded > 0, "no kill caught a batch in flight: nothing was left to publish again"
    assert reclaimed > 0, "rows left leased by a killed relay were not claimed again"
    assert set(rows.values()) == {"sent"}, "a row is not sent"
    ids = [m.headers.get("Nats-Msg-Id") for m in stored]
    assert len(stored) == 5000, f"{len(stored)} messages in the stream for 5,000 events"
    assert set(ids) == set(rows), "the stream's message ids are not the rows' event ids"
    survivors = {n: c for n, c in codes.items() if n not in killed}
    assert all(c == 0 for c in survivors.values()), fleet.failures(survivors)
    report(
        "jetstream-sigkill",
        events=len(committed),
        kills=len(killed),
        stranded=stranded,
        reclaimed=reclaimed,
        stored=len(stored),
        duplicates_in_stream=len(stored) - len(set(ids)),
    )


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_celery_fleet_publishes_to_jetstream_exactly_once_through_a_sigkill(
    pg_url: str, pg_engine: sa.Engine, amqp_url: str, jetstream: Stream, tmp_path: Path
) -> None:
    """Two `celery -A relay worker` (their own tasks on RabbitMQ, the events to JetStream), one
    SIGKILLed while holding a batch: 2,000 events, exactly 2,000 messages in the stream, one
    per row under its event id, every row sent."""
    env = relay_env(
        database_url=pg_url,
        broker_url=amqp_url,
        events_url=jetstream.url,
        nats_stream=jetstream.name,
        exchange=jetstream.exchange,
        queue=celery_fleet.unique_queue(),
        batch_size=100,
        lease_seconds=3,
        confirm_timeout_seconds=2,
        tick_seconds=0.5,
        max_fanout=2,
    )
    with celery_fleet.fleet(env, tmp_path) as fleet:
        workers = [fleet.worker(f"n{i}") for i in range(2)]
        fleet.beat()
        committed = enqueue_committed(pg_engine, 2000, per_tx=200)
        victim = None
        deadline = time.monotonic() + 60
        while victim is None and time.monotonic() < deadline:
            held = holders(pg_engine)
            victim = next((w for w in workers if w.popen.pid in held), None)
            if victim is None:
                time.sleep(0.01)  # polling for a worker caught holding a batch, bounded above
        assert victim is not None, "no worker was caught holding a batch"
        victim.signal(signal.SIGKILL)
        victim.popen.wait(10)
        wait_until(lambda: drained(pg_engine), 120, "the fleet to drain the killed worker's rows")
        rows = _event_ids(pg_engine)
        reclaimed = _reclaimed(pg_engine)
        stored = jetstream.messages()
    assert len(committed) == 2000
    assert set(rows.values()) == {"sent"}, "a row is not sent"
    assert len(stored) == 2000, f"{len(stored)} messages in the stream for 2,000 events"
    assert {m.headers.get("Nats-Msg-Id") for m in stored} == set(rows)
    report("jetstream-celery-sigkill", events=2000, reclaimed=reclaimed, stored=len(stored))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_connection_cuts_and_stalls_leave_each_event_exactly_once_in_the_stream(
    pg_url: str, pg_engine: sa.Engine, jetstream: Stream, tmp_path: Path
) -> None:
    """One `relay dispatch --loop` reaching NATS through a proxy that resets its connection
    (acks lost mid-batch) and black-holes it (acks past the deadline), three times each, while
    3,000 events arrive: the unacknowledged batches are published again on a new connection,
    and the stream still holds each event once; the relay never exits."""
    with running_proxy("127.0.0.1", urlsplit(jetstream.url).port or 4222) as proxy:
        fleet = Fleet(_through(proxy, pg_url, jetstream), tmp_path)
        producer = SteadyProducer(pg_engine, total=3000, seconds=8.0)
        try:
            fleet.start(1)
            producer.start()
            for fault in (proxy.cut, proxy.stall) * 3:
                time.sleep(1.0)  # pacing between faults, not synchronisation
                fault()
                time.sleep(0.5 if fault == proxy.cut else 2.5)  # a stall past the ack deadline
                proxy.restore()
            committed = producer.join()
            wait_until(lambda: drained(pg_engine), 90, "the relay to drain after the faults")
            fleet.assert_alive()
            rows = _event_ids(pg_engine)
            stored = jetstream.messages()
            codes = fleet.stop()
        finally:
            fleet.stop()
    assert set(rows.values()) == {"sent"}, "a row is not sent"
    assert len(stored) == len(committed), f"{len(stored)} messages for {len(committed)} events"
    assert {m.headers.get("Nats-Msg-Id") for m in stored} == set(rows)
    assert all(c == 0 for c in codes.values()), fleet.failures(codes)
    report("jetstream-cuts", events=len(committed), stored=len(stored))
