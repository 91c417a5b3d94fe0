"""The embedded default on a fresh directory: no RELAY_* variable, no server, several processes.

SQLite holds the outbox and Kombu's filesystem transport carries both the relay's Celery tasks
and the events, so a consumer in another process receives what the relay publishes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import kombu
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.config import DEFAULT_BROKER_URL, DEFAULT_DATABASE_URL
from relay.publishers import transports
from relay.store.engine import create_engine
from tests.support.celery_fleet import CELERY_BIN
from tests.support.env import relay_env, wait_until
from tests.support.rows import count_by_status


class _Consumer:
    """A queue bound to the default exchange on the embedded transport, in this process."""

    def __init__(self) -> None:
        options = transports.transport_options(DEFAULT_BROKER_URL)
        self.conn = kombu.Connection(DEFAULT_BROKER_URL, transport_options=options)
        exchange = kombu.Exchange("outbox", type="topic", durable=True)
        # A fresh queue name per test: Kombu remembers bindings per process, and each test has
        # its own folder.
        name = f"app.orders.{uuid.uuid4().hex[:8]}"
        self.queue = kombu.Queue(name, exchange, routing_key="order.#")(self.conn.channel())
        self.queue.declare()
        self.ids: list[str] = []

    def poll(self) -> int:
        while (msg := self.queue.get(no_ack=True)) is not None:
            self.ids.append(str(msg.headers["outbox_id"]))
        return len(self.ids)


@pytest.fixture
def fresh_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for var in [v for v in os.environ if v.startswith("RELAY_")]:
        monkeypatch.delenv(var)
    return tmp_path


def _enqueue(n: int) -> tuple[sa.Engine, set[str]]:
    engine = create_engine(DEFAULT_DATABASE_URL)
    with Session(engine) as session, session.begin():
        ids = {str(relay.enqueue(session, "order.created", {"n": i})) for i in range(n)}
    return engine, ids


def _relay(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay", *args],
        cwd=cwd,
        env=relay_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_dispatch_once_reaches_a_consumer_in_another_process(fresh_dir: Path) -> None:
    """`relay migrate` + `relay dispatch --once` with no configuration: every event arrives."""
    assert _relay("migrate", cwd=fresh_dir).returncode == 0
    consumer = _Consumer()
    engine, ids = _enqueue(300)
    out = _relay("dispatch", "--once", cwd=fresh_dir)
    assert out.returncode == 0, out.stderr
    consumer.poll()
    assert sorted(consumer.ids) == sorted(ids)
    assert count_by_status(engine) == {"sent": 300}
    engine.dispose()


def test_celery_worker_with_beat_relays_on_the_defaults(fresh_dir: Path) -> None:
    """`celery -A relay worker -B` on a fresh directory relays events to another process."""
    assert _relay("migrate", cwd=fresh_dir).returncode == 0
    consumer = _Consumer()
    engine, ids = _enqueue(200)
    log = (fresh_dir / "worker.log").open("wb")
    worker = subprocess.Popen(
        [
            CELERY_BIN,
            "-A",
            "relay",
            "worker",
            "-B",
            "--pool",
            "solo",
            "--loglevel",
            "INFO",
            "-s",
            str(fresh_dir / "beat-schedule"),
        ],
        cwd=fresh_dir,
        env=relay_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(lambda: consumer.poll() >= len(ids), timeout=90, what="events delivered")
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        log.close()
    assert sorted(consumer.ids) == sorted(ids), (fresh_dir / "worker.log").read_text()[-3000:]
    assert count_by_status(engine) == {"sent": 200}
    engine.dispose()
