"""deploy/prometheus/alerts.yml in a real Prometheus scraping real relays every second.

The rules are loaded as shipped but for ``for:``, shortened to a few seconds by rewriting the
file in the test (``tests.support.prometheus.shortened``). In one run, in order: a healthy relay
delivering a steady stream for 25 s fires nothing (no alert even pending); a dead-lettered row
fires RelayDeadLetters; a second relay whose broker refuses its login fires
RelayBrokerUnreachable for that relay; SIGKILLing both fires RelayInstanceDown for each and
RelayNoneAlive.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from relay.store.schema.tables import outbox
from tests.support import prometheus
from tests.support.broker import Collector
from tests.support.celery_fleet import insert_rows
from tests.support.env import relay_env, wait_until
from tests.support.scrape import free_port, scrape

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

RELAY = [sys.executable, "-m", "relay"]
#: Every ``for:`` in the test: long enough that one scrape's blip would not fire, short enough
#: that the test stays short.
FOR_SECONDS = 3
HEALTHY_SECONDS = 25


def _relay(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [*RELAY, "dispatch", "--loop"], env=env, stdout=out, stderr=subprocess.STDOUT
        )


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _firing_within(
    server: prometheus.Prometheus, alert: str, labels: dict[str, str], timeout: float
) -> None:
    def fired() -> bool:
        return any(labels.items() <= found.items() for found in server.firing().get(alert, []))

    try:
        wait_until(fired, timeout, f"{alert} {labels} firing", interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; firing: {server.firing()}\n{server.log}") from None


def test_the_shipped_alerts_stay_quiet_on_a_healthy_relay_and_fire_on_each_failure(
    pg_url: str,
    pg_engine: sa.Engine,
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    rules = prometheus.shortened(prometheus.RULES.read_text(), FOR_SECONDS)
    fast = {"tick_seconds": 0.2, "backoff_base_seconds": 0.5, "backoff_max_seconds": 2}
    good_port, bad_port = free_port(), free_port()
    good = f"127.0.0.1:{good_port}"
    env = relay_env(
        database_url=pg_url,
        broker_url=amqp_url,
        exchange=exchange_name,
        metrics_port=good_port,
        **fast,
    )
    procs.append(_relay(env, tmp_path / "good.log"))
    wait_until(lambda: scrape(good_port) is not None, 30, "the relay's metrics endpoint")
    with prometheus.running([good], rules) as server:
        wait_until(lambda: server.targets_up() == 1, 30, "the relay scraped", interval=0.5)
        # Warm up: the relay has confirmed a batch and Prometheus has scraped it since.
        insert_rows(pg_engine, 10, "kit.order")
        collector.drain(10, timeout=30)
        wait_until(
            lambda: server.get(
                "/api/v1/query?query=relay_last_publish_success_timestamp_seconds%3E0"
            )["result"],
            30,
            "a confirmed publish scraped",
            interval=0.5,
        )

        # 1. A healthy relay under a steady stream: no alert, not even pending.
        stop = threading.Event()

        def stream() -> None:
            while not stop.wait(0.25):
                insert_rows(pg_engine, 5, "kit.order")

        writer = threading.Thread(target=stream, daemon=True)
        writer.start()
        seen: dict[str, object] = {}
        try:
            deadline = time.monotonic() + HEALTHY_SECONDS
            while time.monotonic() < deadline:
                for alert in server.get("/api/v1/alerts")["alerts"]:
                    seen.setdefault(alert["labels"]["alertname"], alert)
                time.sleep(0.5)
        finally:
            stop.set()
            writer.join()
        assert not seen, seen
        assert server.targets_up() == 1

        # 2. A row no message can carry is dead-lettered at its first attempt.
        with pg_engine.begin() as conn:
            conn.execute(
                sa.insert(outbox).values(event_type="kit.bad", payload={}, headers={"k" * 300: 1})
            )
        _firing_within(server, "RelayDeadLetters", {"severity": "warning"}, 60)

        # 3. A second relay whose broker refuses its login opens its breaker.
        bad_env = {
            **env,
            "RELAY_BROKER_URL": re.sub(
                r"//([^:/@]+)(:[^@]*)?@", r"//\1:not-the-password@", amqp_url
            ),
            "RELAY_METRICS_PORT": str(bad_port),
        }
        assert bad_env["RELAY_BROKER_URL"] != amqp_url
        procs.append(_relay(bad_env, tmp_path / "refused.log"))
        bad = f"127.0.0.1:{bad_port}"
        server.scrape([good, bad])
        wait_until(lambda: server.targets_up() == 2, 30, "both relays scraped", interval=0.5)
        # Rows for it to claim (and fail to publish, giving them back).
        stop.clear()
        writer = threading.Thread(target=stream, daemon=True)
        writer.start()
        try:
            _firing_within(
                server, "RelayBrokerUnreachable", {"instance": bad, "severity": "critical"}, 60
            )
        finally:
            stop.set()
            writer.join()
        assert all(a["instance"] != good for a in server.firing()["RelayBrokerUnreachable"])

        # 4. Both relays SIGKILLed: each instance is down, and no relay is alive.
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        _firing_within(server, "RelayInstanceDown", {"instance": good}, 60)
        _firing_within(server, "RelayInstanceDown", {"instance": bad}, 60)
        _firing_within(server, "RelayNoneAlive", {"severity": "critical"}, 60)
