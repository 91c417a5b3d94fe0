"""SIGTERM to a `celery -A relay worker` while the outbox database or the events broker is
frozen (no byte forwarded, no error): the warm shutdown ends within the lease plus
``timing.STOP_SECONDS``, because every call of the task in flight has a deadline under the lease
(the solo pool enforces no time limit), and a fresh relay then delivers every event."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from relay.config import timing
from tests.support.broker import Collector
from tests.support.celery_fleet import fleet, unique_queue
from tests.support.env import relay_env
from tests.support.fleet import (
    IN_FLIGHT_BATCHES,
    TEST_SETTINGS,
    Fleet,
    audit_delivery,
    enqueue_committed,
    fleet_env,
)
from tests.support.proxy import TcpProxy

pytestmark = [pytest.mark.serial, pytest.mark.timeout(240)]

LEASE = float(str(TEST_SETTINGS["lease_seconds"]))
BATCH = int(str(TEST_SETTINGS["batch_size"]))


@pytest.mark.parametrize("frozen", ["database", "broker"])
def test_a_celery_worker_obeys_sigterm_while_a_server_is_frozen(
    frozen: str,
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
    engine: sa.Engine,
    amqp_proxy: TcpProxy,
    pg_proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    """Rows keep coming while the outbox database (or the events broker, not Celery's own)
    stops answering; SIGTERM to the worker: it exits 0 within LEASE + STOP_SECONDS, and a
    fresh `relay dispatch --loop` delivers every committed event."""
    proxy = pg_proxy if frozen == "database" else amqp_proxy
    db_url = pg_proxy.url_for(pg_url) if frozen == "database" else pg_url
    events_url = amqp_proxy.url_for(amqp_url) if frozen == "broker" else amqp_url
    env = relay_env(
        database_url=db_url,
        broker_url=amqp_url,
        events_url=events_url,
        exchange=exchange_name,
        queue=unique_queue(),
        tick_seconds=0.2,
        **{k: v for k, v in TEST_SETTINGS.items() if k not in ("tick_seconds", "exchange")},
    )
    with fleet(env, tmp_path) as f:
        f.beat()
        worker = f.worker("w1")
        ids = enqueue_committed(engine, 200)
        assert len(collector.drain(200, timeout=60)) == 200
        proxy.stall()
        ids += enqueue_committed(engine, 300)
        # Long enough for a task to be inside a call to the frozen server (the scenario).
        time.sleep(1.5)
        sent = time.monotonic()
        worker.signal(signal.SIGTERM)
        code = worker.popen.wait(timeout=LEASE + timing.STOP_SECONDS + 30)
        took = time.monotonic() - sent
        log = worker.log()
    proxy.restore()
    assert code == 0, log[-3000:]
    assert took <= LEASE + timing.STOP_SECONDS, f"{took:.1f}s\n{log[-3000:]}"
    fresh = Fleet(fleet_env(pg_url, amqp_url, exchange_name), tmp_path)
    try:
        fresh.start(1)
        result = audit_delivery(
            engine, collector, ids, duplicate_bound=IN_FLIGHT_BATCHES * BATCH, timeout=90
        )
    finally:
        codes = fresh.stop()
    assert set(codes.values()) == {0}, fresh.failures(codes)
    print(f"[stop] celery worker, {frozen} frozen: exited {code} {took:.1f}s after SIGTERM")
    print(f"[stop] duplicates {result.duplicates}")
