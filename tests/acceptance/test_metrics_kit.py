"""Every ``relay_…`` series that deploy/prometheus/alerts.yml and deploy/grafana/relay.json query
is exported by a running relay: ``relay dispatch --loop`` (one database, and over
``RELAY_DATABASES`` for the connection budget), and a prefork ``celery -A relay worker``.

A labelled counter shows in a single process's exposition from the start (its HELP and TYPE);
in a prefork worker's multiprocess mode only once a child counted it, so the rows written here
make each counter the rules need count: one sent, one dead letter (a header AMQP cannot carry),
one past its deadline.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from relay.store.schema.tables import outbox
from tests.support import services
from tests.support.broker import Collector
from tests.support.celery_fleet import fleet, insert_rows, unique_queue
from tests.support.env import relay_env, wait_until
from tests.support.prometheus import DASHBOARD, RULES, series_in
from tests.support.scrape import exported, free_port, scrape, total

pytestmark = pytest.mark.timeout(240)

RELAY = [sys.executable, "-m", "relay"]

#: Served only where a replay runs (``relay replay``, the console), never by a dispatching relay.
REPLAY_ONLY = {"relay_events_replayed_total"}
#: The connection budget of a relay over ``RELAY_DATABASES`` (relay.observe.budget).
MANY_DATABASES_ONLY = {
    "relay_connections_budget",
    "relay_connections_in_use",
    "relay_databases_waiting",
    "relay_databases",
}
#: Counted only on a broker's refusal with attempts left, which this test does not provoke: a
#: prefork worker's endpoint shows it from a child's first reschedule (the loop runner's shows
#: it from the start, asserted below).
RESCHEDULE_ONLY = {"relay_events_rescheduled_total"}


def _queried() -> set[str]:
    return series_in(RULES.read_text()) | series_in(DASHBOARD.read_text())


def _missing(port: int, expected: set[str]) -> set[str]:
    """Of ``expected`` (histograms by name), what the endpoint does not export."""
    names = {n.removesuffix("_bucket") for n in exported(port)}
    return expected - names


def _write_failing_rows(engine: sa.Engine) -> None:
    """One row AMQP cannot carry (dead-lettered at its first attempt) and one whose deadline
    has passed (dead-lettered unpublished, counted as expired)."""
    with engine.begin() as conn:
        conn.execute(
            sa.insert(outbox).values(event_type="kit.bad", payload={}, headers={"k" * 300: 1})
        )
        conn.execute(
            sa.insert(outbox).values(
                event_type="kit.late",
                payload={},
                expires_at=datetime.now(UTC) - timedelta(hours=1),
            )
        )


def _loop(env: dict[str, str], port: int, expected: set[str]) -> set[str]:
    proc = subprocess.Popen([*RELAY, "dispatch", "--loop"], env=env, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: scrape(port) is not None, 30, "the metrics endpoint")
        try:
            wait_until(lambda: not _missing(port, expected), 30, "every queried series")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {sorted(_missing(port, expected))}") from None
        return exported(port)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def test_the_loop_runner_exports_every_series_the_rules_and_dashboard_query(
    pg_url: str, engine: sa.Engine, amqp_url: str, exchange_name: str, collector: Collector
) -> None:
    queried = _queried()
    assert len(queried) > 20
    port = free_port()
    settings = {"broker_url": amqp_url, "exchange": exchange_name, "metrics_port": port}
    insert_rows(engine, 20, "kit.ok")
    _write_failing_rows(engine)
    single = queried - REPLAY_ONLY - MANY_DATABASES_ONLY
    names = _loop(relay_env(database_url=pg_url, **settings), port, single)
    collector.drain(20, timeout=60)
    assert not single - {n.removesuffix("_bucket") for n in names}
    assert names >= RESCHEDULE_ONLY
    # Over RELAY_DATABASES, the budget gauges too, and every database's outbox gauges (read by
    # the runner within its units of work, labelled source: relay.observe.budget.serve).
    port = free_port()
    settings["metrics_port"] = port
    env = relay_env(**settings)
    env["RELAY_DATABASES"] = f"kit={pg_url}"
    names = _loop(env, port, single | MANY_DATABASES_ONLY)
    assert names >= MANY_DATABASES_ONLY


def test_a_prefork_celery_worker_exports_every_series_the_rules_and_dashboard_query(
    pg_url: str, engine: sa.Engine, exchange_name: str, tmp_path: Path
) -> None:
    services.require("RabbitMQ", services.AMQP_URL)
    expected = _queried() - REPLAY_ONLY - MANY_DATABASES_ONLY - RESCHEDULE_ONLY
    port = free_port()
    env = relay_env(
        database_url=pg_url,
        broker_url=services.AMQP_URL,
        exchange=exchange_name,
        queue=unique_queue(),
        tick_seconds=0.5,
        metrics_port=port,
    )
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "metrics")
    collector = Collector(services.AMQP_URL, exchange_name)
    try:
        with fleet(env, tmp_path) as f:
            f.beat()
            f.worker("w0", "--pool", "prefork", "--concurrency", "1")
            wait_until(lambda: scrape(port) is not None, 30, "the worker's metrics endpoint")
            insert_rows(engine, 20, "kit.ok")
            _write_failing_rows(engine)
            collector.drain(20, timeout=120)
            wait_until(
                lambda: total(scrape(port) or {}, "relay_events_expired_total") == 1,
                60,
                "the expired row counted",
            )
            missing = _missing(port, expected)
    finally:
        collector.close()
    assert not missing, sorted(missing)
