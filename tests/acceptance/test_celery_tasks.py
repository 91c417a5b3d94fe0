"""The relay's Celery tasks on real workers: duplicates, warm shutdown, purge."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import sqlalchemy as sa

from relay.celery import create_app
from relay.celery.names import CLAIM_AND_DISPATCH, PURGE_SENT
from relay.config import Settings
from relay.store.schema.tables import outbox
from tests.support.broker import Collector
from tests.support.celery_fleet import counts, fleet, insert_rows, unique_queue
from tests.support.env import relay_env, wait_until

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def env(pg_url: str, amqp_url: str, exchange_name: str) -> dict[str, str]:
    return relay_env(
        database_url=pg_url,
        broker_url=amqp_url,
        exchange=exchange_name,
        queue=unique_queue(),
        batch_size=50,
    )


def _sent_ids(engine: sa.Engine) -> set[int]:
    with engine.connect() as conn:
        return set(conn.execute(sa.select(outbox.c.id).where(outbox.c.status == "sent")).scalars())


def test_duplicated_and_redelivered_tasks_never_publish_twice(
    env: dict[str, str], engine: sa.Engine, collector: Collector, tmp_path: Path
) -> None:
    """30 concurrent claim_and_dispatch tasks, 20 of them one task id delivered over and over,
    on 3 workers: each event is published once, and late duplicates publish nothing."""
    app = create_app(Settings.from_env(env))
    queue = env["RELAY_QUEUE"]
    ids = insert_rows(engine, 3000)
    with fleet(env, tmp_path) as f:
        for proc in [f.worker(f"w{i}", ready=False) for i in range(3)]:
            proc.wait_for_log(" ready.")
        for _ in range(10):
            app.send_task(CLAIM_AND_DISPATCH, queue=queue)
        for _ in range(20):
            app.send_task(CLAIM_AND_DISPATCH, queue=queue, task_id="redelivered-claim")
        received = collector.drain(len(ids), timeout=90)
        wait_until(lambda: counts(engine) == {"sent": len(ids)}, 30, "every row sent")
        for _ in range(10):
            app.send_task(CLAIM_AND_DISPATCH, queue=queue, task_id="redelivered-claim")
        received = collector.drain(len(ids) + 1, timeout=3)
    got = [m.outbox_id for m in received]
    assert len(got) == len(set(got)) == len(ids)
    assert set(got) == set(ids)


def test_warm_shutdown_finishes_and_records_the_batch_in_flight(
    env: dict[str, str], engine: sa.Engine, collector: Collector, tmp_path: Path
) -> None:
    """SIGTERM mid-drain: the worker exits cleanly, no row is left processing, and exactly the
    rows marked sent were published, once each."""
    env = {**env, "RELAY_LEASE_SECONDS": "120", "RELAY_BATCH_SIZE": "20"}
    app = create_app(Settings.from_env(env))
    ids = insert_rows(engine, 20_000)
    with fleet(env, tmp_path) as f:
        worker = f.worker("w0")
        app.send_task(CLAIM_AND_DISPATCH, queue=env["RELAY_QUEUE"])
        wait_until(lambda: counts(engine).get("sent", 0) >= 500, 60, "the drain to be underway")
        worker.signal(signal.SIGTERM)
        assert worker.popen.wait(60) == 0
        assert "Warm shutdown" in worker.log()
    left = counts(engine)
    assert left.get("processing", 0) == 0
    assert left.get("sent", 0) + left.get("pending", 0) == len(ids)
    assert left.get("pending", 0) > 0, "the drain was not cut short by the shutdown"
    sent = _sent_ids(engine)
    received = collector.drain(len(sent), timeout=30, settle=1.0)
    got = [m.outbox_id for m in received]
    assert len(got) == len(set(got))
    assert set(got) == sent


def test_purge_sent_task_deletes_only_sent_rows_past_the_retention(
    env: dict[str, str], engine: sa.Engine, tmp_path: Path
) -> None:
    """relay.purge_sent on a worker deletes sent rows older than RELAY_RETENTION_SECONDS and
    keeps recent sent rows and unsent ones."""
    env = {**env, "RELAY_RETENTION_SECONDS": "3600"}
    app = create_app(Settings.from_env(env))
    old, recent, pending = (
        insert_rows(engine, 2500),
        insert_rows(engine, 10),
        insert_rows(engine, 5),
    )
    with engine.begin() as conn:
        for ids, age in ((old, "2 hours"), (recent, "1 minute")):
            conn.execute(
                sa.update(outbox)
                .where(outbox.c.id.in_(ids))
                .values(status="sent", sent_at=sa.func.now() - sa.text(f"interval '{age}'"))
            )
    with fleet(env, tmp_path) as f:
        f.worker("w0")
        app.send_task(PURGE_SENT, queue=env["RELAY_QUEUE"])
        wait_until(lambda: counts(engine).get("sent") == len(recent), 60, "the old rows purged")
    assert counts(engine) == {"sent": len(recent), "pending": len(pending)}
