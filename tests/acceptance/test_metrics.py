"""Prometheus metrics of real relay processes, scraped over HTTP after a real drain."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from relay.store.schema.tables import outbox
from tests.support import services
from tests.support.broker import Collector
from tests.support.celery_fleet import counts, fleet, insert_rows, unique_queue
from tests.support.env import relay_env, wait_until
from tests.support.scrape import Samples, free_port, scrape, total

pytestmark = pytest.mark.timeout(240)

RELAY = [sys.executable, "-m", "relay"]
#: A header key AMQP cannot carry (a field-table key is at most 255 bytes): every attempt fails.
UNSENDABLE = {"k" * 300: 1}


def _insert_unsendable(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.insert(outbox).values(event_type="shop.bad", payload={}, headers=UNSENDABLE)
        )


def _scraped_until(
    port: int, done: Callable[[Samples], bool], timeout: float, what: str
) -> Samples:
    """The first scrape for which ``done`` holds, polled within ``timeout``."""
    last: list[Samples] = []

    def check() -> bool:
        samples = scrape(port)
        if samples is None:
            return False
        last[:] = [samples]
        return done(samples)

    wait_until(check, timeout, what, interval=0.2)
    return last[0]


def test_dispatch_loop_serves_its_counters_histograms_and_the_outbox_gauges(
    pg_url: str, engine: sa.Engine, amqp_url: str, exchange_name: str, collector: Collector
) -> None:
    """Given 1,500 events of two types and one row AMQP cannot carry, a `relay dispatch --loop`
    with RELAY_METRICS_PORT serves exact sent counts per event type, the bad row's failure (on
    its first attempt: no message can carry it, so it is never rescheduled), a lag observation
    per sent event, and the outbox gauges (1 failed, nothing pending)."""
    port = free_port()
    env = relay_env(
        database_url=pg_url,
        broker_url=amqp_url,
        exchange=exchange_name,
        metrics_port=port,
        max_attempts=2,
        backoff_base_seconds=0.01,
        backoff_max_seconds=0.05,
        tick_seconds=0.2,
    )
    proc = subprocess.Popen([*RELAY, "dispatch", "--loop"], env=env, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: scrape(port) is not None, 30, "the metrics endpoint")
        insert_rows(engine, 1000, "shop.order")
        insert_rows(engine, 500, "shop.refund")
        _insert_unsendable(engine)
        collector.drain(1500, timeout=60)
        samples = _scraped_until(
            port,
            lambda s: (
                total(s, "relay_events_failed_total") == 1
                and total(s, "relay_outbox_rows", status="failed") == 1
                and total(s, "relay_events_sent_total") == 1500
            ),
            60,
            "the drain in the metrics",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    assert total(samples, "relay_events_sent_total", event_type="shop.order") == 1000
    assert total(samples, "relay_events_sent_total", event_type="shop.refund") == 500
    assert total(samples, "relay_events_rescheduled_total", event_type="shop.bad") == 0
    assert total(samples, "relay_events_failed_total", event_type="shop.bad") == 1
    assert total(samples, "relay_events_claimed_total") == 1501
    assert total(samples, "relay_lease_lost_total") == 0
    assert total(samples, "relay_delivery_lag_seconds_count") == 1500
    assert total(samples, "relay_delivery_lag_seconds_sum") > 0
    assert total(samples, "relay_publish_seconds_count") >= 1
    assert total(samples, "relay_claim_seconds_count") >= 2
    assert total(samples, "relay_outbox_up") == 1
    assert total(samples, "relay_outbox_rows", status="pending") == 0
    assert total(samples, "relay_outbox_rows", status="processing") == 0
    assert total(samples, "relay_oldest_pending_age_seconds") == 0
    assert total(samples, "relay_expired_leases") == 0
    for (name, pairs), _ in samples.items():
        if name.startswith("relay_"):
            assert {k for k, _ in pairs} <= {"source", "event_type", "status", "le"}, (name, pairs)


def test_prefork_celery_worker_adds_up_its_children_and_reads_the_gauges_once(
    pg_url: str, engine: sa.Engine, exchange_name: str, tmp_path: Path
) -> None:
    """A `celery -A relay worker --pool prefork -c 2` with RELAY_METRICS_PORT serves, from its
    main process, the sum of what its children relayed (multiprocess mode) and the outbox
    gauges; the children's counter files are in PROMETHEUS_MULTIPROC_DIR."""
    services.require("RabbitMQ", services.AMQP_URL)
    port, directory = free_port(), tmp_path / "metrics"  # created by the worker
    env = relay_env(
        database_url=pg_url,
        broker_url=services.AMQP_URL,
        exchange=exchange_name,
        queue=unique_queue(),
        tick_seconds=0.5,
        batch_size=100,
        max_fanout=4,
        metrics_port=port,
    )
    env["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    collector = Collector(services.AMQP_URL, exchange_name)
    try:
        with fleet(env, tmp_path) as f:
            f.beat()
            worker = f.worker("w0", "--pool", "prefork", "--concurrency", "2")
            wait_until(lambda: scrape(port) is not None, 30, "the worker's metrics endpoint")
            insert_rows(engine, 1000, "fleet.a")
            insert_rows(engine, 1000, "fleet.b")
            collector.drain(2000, timeout=120)
            wait_until(lambda: counts(engine) == {"sent": 2000}, 30, "every row marked sent")
            samples = _scraped_until(
                port,
                lambda s: (
                    total(s, "relay_events_sent_total") == 2000
                    and total(s, "relay_outbox_rows", status="pending") == 0
                ),
                60,
                "the children's counts at the parent's endpoint",
            )
            pids = {p.stem.rsplit("_", 1)[-1] for p in directory.glob("counter_*.db")}
            main_pid = str(worker.popen.pid)
    finally:
        collector.close()
    assert total(samples, "relay_events_sent_total", event_type="fleet.a") == 1000
    assert total(samples, "relay_events_sent_total", event_type="fleet.b") == 1000
    assert total(samples, "relay_delivery_lag_seconds_count") == 2000
    assert total(samples, "relay_publish_seconds_count") >= 1
    assert total(samples, "relay_outbox_up") == 1
    assert total(samples, "relay_outbox_rows", status="failed") == 0
    assert pids, "no child wrote counters"
    assert main_pid not in pids, "counters come from the pool's children"
