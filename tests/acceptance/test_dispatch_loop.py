"""End to end with real processes: `relay dispatch --loop` x2 deliver exactly the committed set."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from tests.support.broker import Collector
from tests.support.rows import count_by_status

RELAY = [sys.executable, "-m", "relay"]


def _env(db_url: str, amqp_url: str, exchange: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        RELAY_DATABASE_URL=db_url,
        RELAY_BROKER_URL=amqp_url,
        RELAY_EXCHANGE=exchange,
        RELAY_BATCH_SIZE="100",
        RELAY_LEASE_SECONDS="15",
        RELAY_TICK_SECONDS="0.1",
    )
    return env


def test_two_loops_deliver_exactly_the_committed_events_once(
    pg_url: str, engine: sa.Engine, amqp_url: str, exchange_name: str, collector: Collector
) -> None:
    """5,000 committed events (plus rolled-back ones) through two relay processes: each
    committed event arrives exactly once, no rolled-back event arrives, no row is left behind."""
    committed: set[int] = set()
    rolled_back: set[int] = set()
    env = _env(pg_url, amqp_url, exchange_name)
    procs = [
        subprocess.Popen([*RELAY, "dispatch", "--loop"], env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        # Business transactions of 10 events while the relays run; every 7th is rolled back.
        for txn in range(590):
            with Session(engine) as session:
                session.begin()
                ids = {
                    relay.enqueue(session, f"shop.order.{txn % 3}", {"txn": txn, "i": i})
                    for i in range(10)
                }
                if txn % 7 == 0:
                    session.rollback()
                    rolled_back |= ids
                else:
                    session.commit()
                    committed |= ids
        assert len(committed) >= 5000
        received = collector.drain(len(committed), timeout=120, settle=1.0)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        logs = [p.communicate(timeout=30)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    counts = Counter(m.outbox_id for m in received)
    duplicates = {i: n for i, n in counts.items() if n > 1}
    assert duplicates == {}
    assert set(counts) == committed
    assert not set(counts) & rolled_back
    assert count_by_status(engine) == {"sent": len(committed)}
    with engine.connect() as conn:
        workers = conn.execute(sa.text("SELECT count(DISTINCT locked_by) FROM outbox")).scalar()
    assert workers == 2, "both relay processes should have taken part"


def test_sigterm_finishes_the_batch_in_flight(
    pg_url: str, engine: sa.Engine, amqp_url: str, exchange_name: str, collector: Collector
) -> None:
    """A relay stopped with SIGTERM while draining leaves no row in processing."""
    with Session(engine) as session, session.begin():
        for i in range(3000):
            relay.enqueue(session, "bulk.item", {"i": i})
    proc = subprocess.Popen(
        [*RELAY, "dispatch", "--loop"],
        env=_env(pg_url, amqp_url, exchange_name),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while count_by_status(engine).get("sent", 0) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    counts = count_by_status(engine)
    assert counts.get("processing", 0) == 0
    sent = counts.get("sent", 0)
    assert sent > 0
    received = collector.drain(sent, timeout=30, settle=0.5)
    assert len(received) == sent
    assert len({m.message_id for m in received}) == sent
