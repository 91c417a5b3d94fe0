"""Fault: relay workers SIGKILLed mid-batch, repeatedly, while events keep arriving."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support.broker import Collector
from tests.support.env import wait_until
from tests.support.fleet import (
    IN_FLIGHT_BATCHES,
    Fleet,
    SteadyProducer,
    audit_delivery,
    drained,
    fleet_env,
    holders,
    report,
    statuses,
)

BATCH = 100
LEASE = 3


@pytest.mark.timeout(180)
@pytest.mark.parametrize("delete_on_send", [False, True], ids=["kept", "deleted-at-send"])
def test_sigkill_mid_batch_loses_nothing_and_duplicates_stay_within_kills_times_batch(
    delete_on_send: bool,
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
    engine: sa.Engine,
    tmp_path: Path,
) -> None:
    """Workers killed holding a batch: others reclaim after the lease; duplicates at most the
    batches each victim had in flight; the same when rows are deleted at send."""
    env = fleet_env(
        pg_url,
        amqp_url,
        exchange_name,
        batch_size=BATCH,
        lease_seconds=LEASE,
        delete_on_send=int(delete_on_send),
    )
    fleet = Fleet(env, tmp_path)
    producer = SteadyProducer(engine, total=6000, seconds=8.0)
    killed: set[str] = set()
    held_at_kill = 0
    try:
        fleet.start(3)
        producer.start()
        last_kill = time.monotonic()
        while not producer.done and len(killed) < 12:
            pids = holders(engine)
            victim = next((w for w in map(fleet.by_pid, pids) if w is not None), None)
            if victim is None:
                time.sleep(0.02)
                continue
            fleet.kill(victim)
            killed.add(victim.name)
            held_at_kill += pids[victim.pid]
            last_kill = time.monotonic()
            fleet.start(1)
            # Pacing between faults, not synchronisation: let the fleet make progress.
            time.sleep(0.8)
        committed = producer.join()
        wait_until(lambda: drained(engine), 60, "the fleet to drain after the last kill")
        recover = time.monotonic() - last_kill
        kills = len(killed)
        result = audit_delivery(
            engine,
            collector,
            committed,
            duplicate_bound=kills * IN_FLIGHT_BATCHES * BATCH,
            deleted_at_send=delete_on_send,
        )
        codes = fleet.stop()
    finally:
        fleet.stop()
    assert kills >= 3, "the fleet was never caught holding a batch"
    survivors = {name: code for name, code in codes.items() if name not in killed}
    bad = [name for name, code in survivors.items() if code != 0]
    assert not bad, (
        f"a worker that was not killed did not exit 0 on SIGTERM (None: still running 20 s"
        f" later, its stacks follow): {survivors}\n{fleet.logs(bad)}"
    )
    report(
        "sigkill-deleted-at-send" if delete_on_send else "sigkill",
        events=result.events,
        kills=kills,
        rows_held_at_kills=held_at_kill,
        duplicates=result.duplicates,
        bound=kills * IN_FLIGHT_BATCHES * BATCH,
        recover_s=recover,
    )


@pytest.mark.timeout(60)
def test_sigterm_finishes_the_batch_in_flight(
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
    engine: sa.Engine,
    tmp_path: Path,
) -> None:
    """SIGTERM during a drain: the worker exits 0 and leaves no row processing."""
    from tests.support.fleet import enqueue_committed

    ids = enqueue_committed(engine, 3000)
    fleet = Fleet(fleet_env(pg_url, amqp_url, exchange_name, batch_size=BATCH), tmp_path)
    try:
        (worker,) = fleet.start(1)
        wait_until(lambda: worker.pid in holders(engine), 30, "the worker to hold a batch")
        fleet.signal(worker, signal.SIGTERM)
        assert worker.proc.wait(timeout=30) == 0, worker.log()
        assert statuses(engine).get("processing", 0) == 0, "SIGTERM stranded a batch"
        fleet.start(1)
        wait_until(lambda: drained(engine), 60, "the drain to finish")
        audit_delivery(engine, collector, ids, duplicate_bound=0)
    finally:
        fleet.stop()
