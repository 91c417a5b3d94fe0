"""Event handlers in a real Celery worker (``relay.celery.on_event``): exactly-once effects
through the inbox across SIGKILLs, dead letters for poison events, and re-drive."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.config import Settings
from relay.store.schema.tables import inbox
from tests.support import events_app, relaying
from tests.support.broker import remove
from tests.support.celery_fleet import CELERY_BIN, Proc, unique_queue
from tests.support.env import wait_until

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def handled_db(engine: sa.Engine) -> sa.Engine:
    """The outbox database also holds the handler's table (and the inbox, migrated)."""
    events_app.metadata.create_all(engine)
    return engine


@pytest.fixture
def queue(amqp_url: str) -> Iterator[str]:
    """The handlers' queue; removed afterwards with its dead letters and the worker's task queue."""
    name = unique_queue()
    yield name
    remove(amqp_url, queues=[name, f"{name}.dead", f"{name}.tasks"])


@pytest.fixture
def settings(pg_url: str, amqp_url: str, exchange_name: str) -> Settings:
    """The relay that publishes the events: PostgreSQL and RabbitMQ (overrides the
    all-backends fixture)."""
    return Settings(database_url=pg_url, broker_url=amqp_url, exchange=exchange_name)


@contextmanager
def worker(
    pg_url: str, amqp_url: str, exchange: str, queue: str, log_dir: Path, name: str
) -> Iterator[Proc]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("EVENTS_TEST_")},
        "EVENTS_TEST_DB": pg_url,
        "EVENTS_TEST_BROKER": amqp_url,
        "EVENTS_TEST_EXCHANGE": exchange,
        "EVENTS_TEST_QUEUE": queue,
        "PYTHONUNBUFFERED": "1",
    }
    args = [CELERY_BIN, "-A", "tests.support.events_app", "worker", "-P", "solo", "-l", "INFO"]
    args += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    # A node name of this test's own: a Celery node's pidbox queue is exclusive on the broker.
    proc = Proc(name, [*args, "-n", f"{name}.{queue}@%h", "-Q", f"{queue}.tasks"], env, log_dir)
    try:
        proc.wait_for_log("ready.", timeout=60)
        yield proc
    finally:
        proc.stop()


def _publish(engine: sa.Engine, settings: Settings, payloads: list[dict[str, object]]) -> None:
    """Write the events in one transaction and relay them all (as `relay dispatch --once`)."""
    with Session(engine) as session, session.begin():
        for payload in payloads:
            relay.enqueue(session, "order.created", payload)
    report = relaying.drain(settings)
    assert report.sent == len(payloads), report


def _counts(engine: sa.Engine) -> tuple[int, int, int]:
    """(handled rows, distinct handled ids, rows of an id handled twice or more)."""
    h = events_app.handled
    with engine.connect() as conn:
        total = conn.execute(sa.select(sa.func.count()).select_from(h)).scalar_one()
        distinct = conn.execute(sa.select(sa.func.count(sa.distinct(h.c.message_id)))).scalar_one()
        twice = conn.execute(
            sa.select(h.c.message_id).group_by(h.c.message_id).having(sa.func.count() > 1)
        ).all()
    return total, distinct, len(twice)


def _relay_cli(settings: Settings, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env["RELAY_EVENTS_URL"] = settings.events_connection_url
    done = subprocess.run(
        [sys.executable, "-m", "relay", *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_each_event_takes_effect_once_across_two_sigkills(
    pg_url: str,
    amqp_url: str,
    handled_db: sa.Engine,
    settings: Settings,
    queue: str,
    tmp_path: Path,
) -> None:
    """5,000 events; the worker is SIGKILLed mid-stream twice and restarted: every event's row
    exists exactly once although unacknowledged messages were redelivered."""
    total = 5000
    with worker(pg_url, amqp_url, settings.exchange, queue, tmp_path, "w1") as first:
        _publish(handled_db, settings, [{"n": n} for n in range(total)])
        wait_until(lambda: _counts(handled_db)[0] >= 1000, 120, "1,000 handled")
        first.signal(signal.SIGKILL)
    at_first_kill = _counts(handled_db)[0]
    with worker(pg_url, amqp_url, settings.exchange, queue, tmp_path, "w2") as second:
        wait_until(lambda: _counts(handled_db)[0] >= at_first_kill + 1500, 120, "1,500 more")
        second.signal(signal.SIGKILL)
    at_second_kill = _counts(handled_db)[0]
    with worker(pg_url, amqp_url, settings.exchange, queue, tmp_path, "w3") as third:
        wait_until(lambda: _counts(handled_db)[1] >= total, 180, "every event handled")
        log = third.log()
    assert at_first_kill < at_second_kill < total, "the kills did not land mid-stream"
    assert _counts(handled_db) == (total, total, 0)
    with handled_db.connect() as conn:
        claimed = conn.execute(
            sa.select(sa.func.count()).select_from(inbox).where(inbox.c.consumer == queue)
        ).scalar_one()
    assert claimed == total
    print(f"kills at {at_first_kill} and {at_second_kill} handled; {log.count('ready.')} restart")


def test_poison_events_are_dead_lettered_and_redriven(
    pg_url: str,
    amqp_url: str,
    handled_db: sa.Engine,
    settings: Settings,
    queue: str,
    tmp_path: Path,
) -> None:
    """Three poison events among 100 go to <queue>.dead after 3 attempts while the others are
    handled once; `relay inbox dead` lists them; once cured, `relay inbox redrive` puts them
    back and they are handled once."""
    payloads: list[dict[str, object]] = [{"n": n} for n in range(100)]
    for n in (10, 50, 90):
        payloads[n] = {"n": n, "poison": True}
    with worker(pg_url, amqp_url, settings.exchange, queue, tmp_path, "w1"):
        _publish(handled_db, settings, payloads)
        wait_until(lambda: _counts(handled_db)[0] >= 97, 60, "97 good events handled")
        wait_until(
            lambda: _relay_cli(settings, "inbox", "dead", queue).count("poison event") == 3,
            60,
            "3 dead letters",
        )
        assert _counts(handled_db) == (97, 97, 0)
        listed = _relay_cli(settings, "inbox", "dead", queue)
        assert all("attempts 3" in line for line in listed.splitlines()), listed
        dead_ids = sorted(line.split("\t")[0] for line in listed.splitlines())
        with handled_db.begin() as conn:
            for message_id in dead_ids:
                conn.execute(sa.insert(events_app.cured).values(message_id=message_id))
        assert _relay_cli(settings, "inbox", "redrive", queue).startswith("3 dead letters back")
        wait_until(lambda: _counts(handled_db)[0] >= 100, 60, "the re-driven events handled")
    assert _counts(handled_db) == (100, 100, 0)
    assert "no dead letters" in _relay_cli(settings, "inbox", "dead", queue)
