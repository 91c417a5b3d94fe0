"""``relay replay`` as an operator runs it: a real process, PostgreSQL and RabbitMQ."""

from __future__ import annotations

import getpass
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from relay.config import Settings
from relay.publishers.message import REPLAY_HEADER
from relay.store.operations.store import OperationsStore
from tests.support.broker import Collector
from tests.support.relaying import drain
from tests.support.rows import count_by_status, enqueue_many, rows

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


@pytest.fixture
def target(amqp_url: str, exchange_name: str) -> Iterator[Collector]:
    c = Collector(amqp_url, exchange_name, binding_key="order.*", queue=exchange_name + ".consumer")
    yield c
    c.close()


def _env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "RELAY_DATABASE_URL": settings.database_url,
        "RELAY_BROKER_URL": settings.broker_url,
        "RELAY_EXCHANGE": settings.exchange,
    }


def _relay(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay", *args],
        env=_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _history(engine: sa.Engine, settings: Settings, n: int) -> list[int]:
    ids = enqueue_many(engine, n, "order.created", ordering_key="k")
    ids += enqueue_many(engine, 5, "user.seen")
    for _ in range(30):
        drain(settings)
        if set(count_by_status(engine)) == {"sent"}:
            return ids[:n]
    raise AssertionError(f"rows left unsent: {count_by_status(engine)}")


def test_dry_run_refusals_and_a_replay(
    engine: sa.Engine, settings: Settings, collector: Collector, target: Collector
) -> None:
    """``--dry-run`` prints the count and sends nothing; no selector and an unknown queue exit
    non-zero naming the problem; ``--json`` reports the replay, which reaches the queue alone;
    the audit names the OS user."""
    orders = _history(engine, settings, 20)
    collector.drain(25)
    target.drain(20)
    collector.received.clear()
    target.received.clear()
    before = rows(engine)

    dry = _relay(
        settings, "replay", "--to-queue", target.queue_name, "--event-type", "order.*", "--dry-run"
    )
    assert dry.returncode == 0, dry.stderr
    assert "would replay 20 sent events" in dry.stdout
    bare = _relay(settings, "replay", "--to-queue", target.queue_name)
    assert bare.returncode == 2
    assert "without a selector" in bare.stderr
    unknown = _relay(settings, "replay", "--to-queue", "no-such-queue", "--all")
    assert unknown.returncode == 2
    assert "no queue 'no-such-queue'" in unknown.stderr
    assert target.drain(1, timeout=0.5) == []

    done = _relay(
        settings, "replay", "--to-queue", target.queue_name, "--event-type", "order.*", "--json"
    )

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["matched"], report["sent"], report["complete"]) == (20, 20, True)
    got = target.drain(20, settle=0.5)
    assert [m.outbox_id for m in got] == orders
    assert {m.headers[REPLAY_HEADER] for m in got} == {report["replay_id"]}
    assert collector.drain(1, timeout=0.3) == []
    assert rows(engine) == before
    (entry,) = OperationsStore(engine).audit_log()
    assert (entry["actor"], entry["via"], entry["action"]) == (getpass.getuser(), "cli", "replay")
    assert entry["selector"]["to_queue"] == target.queue_name


def test_sigterm_stops_a_replay_and_its_resume_command_finishes_it_without_duplicates(
    engine: sa.Engine, settings: Settings, collector: Collector, target: Collector
) -> None:
    """Given a slow replay (``--rate 40``) sent SIGTERM midway, it exits non-zero after its
    window in flight is confirmed and prints the command that resumes it; that command
    delivers the rest: every event exactly once, in order."""
    orders = _history(engine, settings, 120)
    collector.drain(125)
    target.drain(120)
    target.received.clear()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "relay",
            "replay",
            "--to-queue",
            target.queue_name,
            "--key",
            "k",
            "--rate",
            "40",
        ],
        env=_env(settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while len(target.drain(10, timeout=1)) < 10 and time.monotonic() < deadline:
        pass
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1, err
    assert "stopped after" in out
    resume = next(line for line in out.splitlines() if line.startswith("resume with: "))
    argv = shlex.split(resume.removeprefix("resume with: "))
    assert argv[:2] == ["relay", "replay"]
    assert "--after" in argv

    rest = _relay(settings, *argv[1:])

    assert rest.returncode == 0, rest.stderr
    got = [m.outbox_id for m in target.drain(120, settle=0.5)]
    assert got == orders
