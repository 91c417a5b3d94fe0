"""Fault: rows a database accepts and no message can carry, written by plain SQL among good
ones, under both runners: each bad row is dead-lettered alone with its reason, every good
event is delivered once, and no relay process exits (docs/guarantees.md, "What a bad row does")."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from relay.store.engine import create_engine
from tests.support import bad_rows, services
from tests.support.broker import Collector
from tests.support.celery_fleet import fleet, unique_queue
from tests.support.env import relay_env, wait_until
from tests.support.fleet import Fleet, audit_delivery, drained, fleet_env, report, statuses

GOOD = 1000
MAX_ATTEMPTS = 3


@pytest.fixture
def db_engine(db_url: str) -> Iterator[sa.Engine]:
    """An engine on the test's database, of every backend (``engine`` is PostgreSQL's here)."""
    eng = create_engine(db_url)
    yield eng
    eng.dispose()


def _drain(engine: sa.Engine, timeout: float, logs: Callable[[], str]) -> None:
    """Wait for no row pending or processing; fail with the statuses and the relays' logs."""
    try:
        wait_until(lambda: drained(engine), timeout, "the outbox to drain")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {statuses(engine)}\n{logs()}") from None


@pytest.mark.timeout(240)
def test_dispatch_loop_dead_letters_each_bad_row_alone_and_delivers_the_rest(
    db_engine: sa.Engine,
    db_url: str,
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """Given 1,000 good events, every bad row the database accepts, then 1,000 more, under two
    `relay dispatch --loop`: each bad row ends failed with its reason within RELAY_MAX_ATTEMPTS
    claims, all 2,000 good events are delivered exactly once, and neither relay exits."""
    engine = db_engine
    env = fleet_env(db_url, amqp_url, exchange_name, batch_size=100, max_attempts=MAX_ATTEMPTS)
    relays = Fleet(env, tmp_path)
    try:
        relays.start(2)
        start = time.monotonic()
        good, bad = bad_rows.good_then_bad_then_good(engine, GOOD)
        _drain(engine, 120, relays.logs)
        elapsed = time.monotonic() - start
        relays.assert_alive()
        audit = audit_delivery(engine, collector, [*good, *bad], failed=bad, duplicate_bound=0)
        reasons = bad_rows.check_dead_lettered(engine, bad, MAX_ATTEMPTS)
    finally:
        codes = relays.stop()
    assert all(code == 0 for code in codes.values()), relays.failures(codes)
    report(
        f"bad rows ({engine.dialect.name}, dispatch --loop)",
        good=len(good),
        bad=len(bad),
        received=audit.received,
        seconds=elapsed,
    )
    for name, reason in reasons.items():
        print(f"  {name}: {reason[:140]}")


@pytest.mark.timeout(300)
def test_celery_fleet_dead_letters_each_bad_row_alone_and_delivers_the_rest(
    db_engine: sa.Engine,
    db_url: str,
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """The same rows under two `celery -A relay worker` and beat: the bad rows failed with
    their reasons, the good events all delivered once, and no task takes its batch with it
    (no row left processing, which would be published again when its lease ran out)."""
    engine = db_engine
    services.require("RabbitMQ", services.AMQP_URL)
    env = relay_env(
        database_url=db_url,
        broker_url=amqp_url,
        events_url=amqp_url,
        exchange=exchange_name,
        queue=unique_queue(),
        tick_seconds=0.5,
        batch_size=100,
        max_fanout=2,
        max_attempts=MAX_ATTEMPTS,
    )
    with fleet(env, tmp_path) as f:
        f.beat()
        workers = [f.worker(f"w{i}") for i in range(2)]
        good, bad = bad_rows.good_then_bad_then_good(engine, GOOD)
        _drain(engine, 150, lambda: "\n".join(w.log()[-3000:] for w in workers))
        audit = audit_delivery(engine, collector, [*good, *bad], failed=bad, duplicate_bound=0)
        reasons = bad_rows.check_dead_lettered(engine, bad, MAX_ATTEMPTS)
        for worker in workers:
            assert worker.popen.poll() is None, f"{worker.name} exited:\n{worker.log()}"
            assert "Traceback" not in worker.log(), worker.log()[-3000:]
    report(
        f"bad rows ({engine.dialect.name}, celery fleet)",
        good=len(good),
        bad=len(bad),
        received=audit.received,
    )
    assert set(reasons) == {r.name for r in bad.values()}
