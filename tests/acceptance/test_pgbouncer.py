"""Through PgBouncer in transaction pooling mode (issue 28): two `relay dispatch --loop` given only
the pooled URL stay up, deliver exactly once, and keep single commits' latency in bounds, with
the wake-up watching through the pooler (the default), off (polling), or on a direct URL;
relays SIGKILLed mid-batch lose nothing; the Celery fleet ticks, claims and purges.
"""

from __future__ import annotations

import collections
import statistics
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from relay.store.engine import create_engine
from tests.support.broker import Collector
from tests.support.celery_fleet import counts, insert_rows, unique_queue
from tests.support.celery_fleet import fleet as celery_fleet
from tests.support.env import relay_env, wait_until
from tests.support.fleet import (
    IN_FLIGHT_BATCHES,
    Fleet,
    SteadyProducer,
    audit_delivery,
    drained,
    fleet_env,
    holders,
    report,
)
from tests.support.pgbouncer import PgBouncer, pgbouncer  # noqa: F401  # the fixture
from tests.support.windows import within_two

#: Timing-sensitive: runs alone, after the parallel part of the suite (see the Makefile).
pytestmark = pytest.mark.serial

BACKLOG = 5000
SINGLES = 100
#: The settings under test are the defaults: only the lease is shortened, as elsewhere.
DEFAULT_TIMING = {"tick_seconds": None, "lease_seconds": 15, "confirm_timeout_seconds": None}


def _single_commits(engine: sa.Engine) -> list[int]:
    """``SINGLES`` one-row transactions of plain SQL, 20 ms apart."""
    ids = []
    for i in range(SINGLES):
        with engine.begin() as conn:
            ids.append(
                conn.execute(
                    sa.text(
                        "INSERT INTO outbox (event_type, payload) "
                        "VALUES ('single', CAST(:p AS jsonb)) RETURNING id"
                    ),
                    {"p": f'{{"i": {i}}}'},
                ).scalar_one()
            )
        time.sleep(0.02)
    return ids


def _latencies(engine: sa.Engine, ids: list[int]) -> list[float]:
    """Seconds from each row's insert to its confirmed send, both on the database's clock."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT EXTRACT(EPOCH FROM sent_at - created_at) FROM outbox WHERE id = ANY(:ids)"
            ),
            {"ids": ids},
        ).all()
    assert len(rows) == len(ids), "a single commit is missing"
    assert all(r[0] is not None for r in rows), "singles not all sent"
    return sorted(float(r[0]) for r in rows)


def _p99(latency: list[float]) -> float:
    return latency[int(len(latency) * 0.99) - 1]


def _singles_within(direct: sa.Engine, bound: float) -> tuple[list[float], int]:
    """The single commits' sorted latencies, and how many windows of them were committed: a
    window whose p99 misses ``bound`` is printed and committed once more (the second worst of
    100 single commits is one stall of a shared machine; a relay slow in every window still
    fails). A CI run once had the listen-url window at 143 ms."""

    def window(n: int) -> list[float]:
        singles = _single_commits(direct)
        wait_until(lambda: drained(direct), 30, "the single commits to be sent")
        latency = _latencies(direct, singles)
        print(f"singles window {n}: p99 {_p99(latency) * 1000:.0f} ms")
        return latency

    return within_two(window, lambda latency: _p99(latency) >= bound)


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("notify", "direct_listener", "p99_bound"),
    [(None, False, 0.100), ("0", False, 0.300), (None, True, 0.100)],
    ids=["defaults", "notify-off", "listen-url"],
)
def test_pooled_relays_stay_up_deliver_once_and_keep_latency(
    pgbouncer: PgBouncer,  # noqa: F811  # the fixture imported above
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
    tmp_path: Path,
    notify: str | None,
    direct_listener: bool,
    p99_bound: float,
) -> None:
    """Given two relays on the pooled URL only, when 5,000 plain-SQL rows and then 100 single
    commits 20 ms apart arrive on the direct URL, then no relay exits, each event arrives
    exactly once, and the singles' p99 stays under 100 ms watched (through the pooler or on
    the direct URL), 300 ms polling."""
    direct = create_engine(pg_url)
    pooled = pgbouncer.url(pg_url)
    env = fleet_env(
        pooled,
        amqp_url,
        exchange_name,
        notify=notify,
        listen_url=pg_url if direct_listener else None,
        **DEFAULT_TIMING,
    )
    fleet = Fleet(env, tmp_path)
    try:
        fleet.start(2)
        with direct.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO outbox (event_type, payload) SELECT 'bulk', "
                    "jsonb_build_object('n', n) FROM generate_series(1, :n) n"
                ),
                {"n": BACKLOG},
            )
        wait_until(lambda: drained(direct), 60, "the backlog to drain through the pooler")
        latency, windows = _singles_within(direct, p99_bound)
        fleet.assert_alive()
        received = collector.drain(BACKLOG + SINGLES * windows, timeout=30, settle=0.5)
        logs = fleet.logs()
        codes = fleet.stop()
    finally:
        fleet.stop()
        direct.dispose()
    counts = collections.Counter(m.message_id for m in received)
    wanted = BACKLOG + SINGLES * windows
    assert len(counts) == wanted, f"{wanted - len(counts)} events lost"
    assert set(counts.values()) == {1}, "an event was delivered twice"
    assert set(codes.values()) == {0}, f"a relay exited on its own: {codes}\n{logs}"
    assert "prepared statement" not in logs, logs
    watched = "relay wake-up watching" in logs
    assert watched == (notify is None), logs
    assert "cannot watch" not in logs, logs
    p50, p99 = statistics.median(latency), _p99(latency)
    report("pgbouncer", notify=notify or "1", direct=direct_listener, p50=p50, p99=p99)
    assert p99 < p99_bound, f"p99 {p99 * 1000:.0f} ms >= {p99_bound * 1000:.0f} ms"


@pytest.mark.timeout(180)
def test_pooled_relays_killed_mid_batch_lose_nothing(
    pgbouncer: PgBouncer,  # noqa: F811
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """Relays on the pooled URL SIGKILLed while holding a batch: the others reclaim after the
    lease through the pooler; nothing lost, duplicates within the victims' batches in flight."""
    direct = create_engine(pg_url)
    fleet = Fleet(fleet_env(pgbouncer.url(pg_url), amqp_url, exchange_name), tmp_path)
    producer = SteadyProducer(direct, total=3000, seconds=5.0)
    kills = 0
    try:
        fleet.start(2)
        producer.start()
        while not producer.done and kills < 4:
            victim = next((w for w in map(fleet.by_pid, holders(direct)) if w), None)
            if victim is None:
                time.sleep(0.02)
                continue
            fleet.kill(victim)
            kills += 1
            fleet.start(1)
            time.sleep(0.8)  # pacing between faults, not synchronisation
        committed = producer.join()
        wait_until(lambda: drained(direct), 60, "the fleet to drain after the last kill")
        audit = audit_delivery(
            direct, collector, committed, duplicate_bound=kills * IN_FLIGHT_BATCHES * 100
        )
        codes = fleet.stop()
        logs = fleet.logs()
    finally:
        fleet.stop()
        direct.dispose()
    assert kills >= 1, "no relay was caught holding a batch"
    survivors = [code for name, code in codes.items() if code != -9]
    assert set(survivors) == {0}, f"a relay exited on its own: {codes}\n{logs}"
    report("pgbouncer sigkill", kills=kills, events=audit.events, duplicates=audit.duplicates)


@pytest.mark.timeout(240)
def test_celery_fleet_through_the_pooler_ticks_claims_and_purges(
    pgbouncer: PgBouncer,  # noqa: F811
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """Beat and two workers on the pooled URL at the default timing: beat's watcher watches
    through the pooler, every event arrives once, single commits stay under 300 ms at
    p99, and the periodic purge deletes the sent rows."""
    direct = create_engine(pg_url)
    env = relay_env(
        database_url=pgbouncer.url(pg_url),
        broker_url=amqp_url,
        exchange=exchange_name,
        queue=unique_queue(),
        retention_seconds=5,
        purge_interval_seconds=2,
    )
    try:
        with celery_fleet(env, tmp_path) as f:
            beat = f.beat()
            f.worker("w0")
            f.worker("w1")
            beat.wait_for_log("relay wake-up watching", timeout=30)
            committed = insert_rows(direct, 2000)
            wait_until(lambda: drained(direct), 60, "the backlog to drain through the pooler")
            singles = _single_commits(direct)
            wait_until(lambda: drained(direct), 30, "the single commits to be sent")
            latency = _latencies(direct, singles)
            received = collector.drain(len(committed) + SINGLES, timeout=30, settle=0.5)
            wait_until(lambda: not counts(direct), 60, "the purge to delete the sent rows")
    finally:
        direct.dispose()
    ids = collections.Counter(m.outbox_id for m in received)
    assert set(ids) == set(committed) | set(singles), "an event was lost"
    assert set(ids.values()) == {1}, "an event was delivered twice"
    p50, p99 = statistics.median(latency), latency[int(len(latency) * 0.99) - 1]
    report("pgbouncer celery", p50=p50, p99=p99)
    assert p99 < 0.300, f"p99 {p99 * 1000:.0f} ms"
