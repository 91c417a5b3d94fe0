"""Wake-up on commit: relay.enqueue's commit sends a claim_and_dispatch, so the tick is no floor."""

from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.celery import create_app
from relay.config import Settings
from relay.produce import enqueue as producer
from tests.support.broker import Collector
from tests.support.celery_fleet import fleet, unique_queue
from tests.support.env import relay_env, wait_until

pytestmark = [pytest.mark.serial, pytest.mark.timeout(180)]


@pytest.fixture
def default_wake(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever a test wires into relay.enqueue's wake-up is undone after it."""
    monkeypatch.setattr(producer.configure(), "wake", None)


def _enqueue_one(engine: sa.Engine, n: int) -> float:
    """Commit one event through relay.enqueue; returns the monotonic time just before commit."""
    with Session(engine) as session:
        relay.enqueue(session, "wake.event", {"n": n})
        started = time.monotonic()
        session.commit()
    return started


@pytest.mark.usefixtures("default_wake")
def test_enqueue_commit_reaches_a_consumer_well_before_the_tick(
    pg_url: str,
    amqp_url: str,
    engine: sa.Engine,
    exchange_name: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """With beat at 5 s, the median commit-to-consumer latency of 20 events is under 1.5 s
    (the tick alone would give ~2.5 s; the wake-up gives tens of milliseconds)."""
    env = relay_env(
        database_url=pg_url,
        broker_url=amqp_url,
        exchange=exchange_name,
        queue=unique_queue(),
        tick_seconds=5,
    )
    settings = Settings.from_env(env)
    create_app(settings)  # wires the wake-up of relay.enqueue to this app
    with fleet(env, tmp_path) as f:
        f.beat()
        f.worker("w0")
        _enqueue_one(engine, -1)
        assert len(collector.drain(1, timeout=60)) == 1, "warm-up event not delivered"
        latencies = []
        for n in range(20):
            started = _enqueue_one(engine, n)
            collector.drain(n + 2, timeout=15)
            latencies.append(time.monotonic() - started)
    assert len(collector.received) == 21
    print(f"wake-up latency: median {statistics.median(latencies):.3f}s max {max(latencies):.3f}s")
    assert statistics.median(latencies) < 1.5


@pytest.mark.usefixtures("default_wake")
def test_a_dead_celery_broker_neither_fails_nor_holds_the_commit(
    pg_url: str, engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """When the wake-up cannot reach the broker, the commit still succeeds at once and the
    failure is logged."""
    dead = Settings(database_url=pg_url, broker_url="amqp://guest:guest@127.0.0.1:9//")
    create_app(dead)
    caplog.set_level(logging.WARNING, logger="relay.celery")
    started = time.monotonic()
    with Session(engine) as session:
        relay.enqueue(session, "wake.event", {"n": 1})
        session.commit()
    assert time.monotonic() - started < 0.5
    with engine.connect() as conn:
        assert conn.execute(sa.text("select count(*) from outbox")).scalar() == 1
    wait_until(
        lambda: any("wake-up not sent" in r.getMessage() for r in caplog.records),
        30,
        "the failed wake-up to be logged",
    )
