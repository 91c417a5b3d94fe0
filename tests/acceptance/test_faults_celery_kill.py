"""Celery workers SIGKILLed mid-drain: the rest of the Celery fleet recovers their rows."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support import celery_fleet
from tests.support.broker import Collector
from tests.support.env import relay_env, wait_until
from tests.support.fleet import (
    IN_FLIGHT_BATCHES,
    audit_delivery,
    drained,
    enqueue_committed,
    holders,
    report,
)

BATCH = 100
LEASE = 3
KILLS = 2


@pytest.mark.timeout(240)
def test_sigkilled_celery_workers_lose_nothing_and_the_fleet_recovers_their_rows(
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
    engine: sa.Engine,
    tmp_path: Path,
) -> None:
    """Two of four `celery -A relay worker` processes are SIGKILLed while holding a batch: every
    committed event is delivered by the others after the lease, none is left processing, and
    duplicates stay within kills x 2 x batch."""
    env = relay_env(
        database_url=pg_url,
        broker_url=amqp_url,
        exchange=exchange_name,
        queue=celery_fleet.unique_queue(),
        batch_size=BATCH,
        lease_seconds=LEASE,
        confirm_timeout_seconds=2,
        tick_seconds=0.5,
        max_fanout=4,
    )
    with celery_fleet.fleet(env, tmp_path) as fleet:
        workers = [fleet.worker(f"k{i}") for i in range(4)]
        fleet.beat()
        committed = enqueue_committed(engine, 8000, per_tx=500)
        killed: list[int] = []
        deadline = time.monotonic() + 60
        while len(killed) < KILLS and time.monotonic() < deadline:
            held = holders(engine)
            victim = next(
                (w for w in workers if w.popen.pid in held and w.popen.pid not in killed), None
            )
            if victim is None:
                time.sleep(0.01)  # polling for a worker caught holding a batch, bounded above
                continue
            victim.signal(signal.SIGKILL)
            victim.popen.wait(10)
            killed.append(victim.popen.pid)
        assert len(killed) == KILLS, "no worker was caught holding a batch"
        last_kill = time.monotonic()
        wait_until(lambda: drained(engine), 120, "the fleet to drain the killed workers' rows")
        recovered = time.monotonic() - last_kill
        audit = audit_delivery(
            engine,
            collector,
            committed,
            duplicate_bound=KILLS * IN_FLIGHT_BATCHES * BATCH,
            timeout=60,
        )
    report(
        "celery SIGKILL",
        events=audit.events,
        kills=KILLS,
        duplicates=audit.duplicates,
        bound=KILLS * IN_FLIGHT_BATCHES * BATCH,
        drained_after_last_kill_s=recovered,
    )
