"""Issue 27's latency target with the wake-up flag: a plain-SQL producer committing one row
every 5 ms (200 ev/s) on PostgreSQL has its events at a consumer with p99 under 100 ms, through
`relay dispatch --loop` and through the Celery fleet, at the default tick and poll floor. While
it writes the relay is busy, the flag is off and writers do not NOTIFY: the listener's gate
looks for rows at the floor instead."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from bench.timing import Arrivals, percentile
from tests.support import celery_fleet
from tests.support.env import relay_env, wait_until
from tests.support.fleet import Fleet, fleet_env

FLAG = "SELECT pg_sequence_last_value('relay_wakeup')"
pytestmark = [pytest.mark.serial, pytest.mark.timeout(240)]

RATE = 200
SECONDS = 5.0
#: The defaults with ``RELAY_NOTIFY`` on PostgreSQL.
TICK_SECONDS = 1.0


def produce(engine: sa.Engine, arrivals: Arrivals, seconds: float = SECONDS) -> list[float]:
    """One single-row transaction every 1/RATE s for ``seconds``; each one's commit-to-arrival
    time, in seconds."""
    committed: dict[int, float] = {}
    sql = sa.text("INSERT INTO outbox (event_type, payload) VALUES ('steady', '{}') RETURNING id")
    start = time.monotonic()
    with engine.connect() as conn:
        for n in range(int(RATE * seconds)):
            time.sleep(max(0.0, start + n / RATE - time.monotonic()))  # the producer's pace
            event_id = conn.execute(sql).scalar_one()
            began = time.monotonic()
            conn.commit()
            committed[event_id] = began
    assert arrivals.wait_for(list(committed), 30.0) == 0, "events missing"
    return sorted(arrivals.at[i] - t for i, t in committed.items())


def measure(engine: sa.Engine, arrivals: Arrivals) -> list[float]:
    """A second of warm-up (every relay process opens its broker channel), the relay idle again
    (the flag on), then the measured load: it starts on an idle relay, as after a quiet spell."""
    produce(engine, arrivals, 1.0)
    wait_until(lambda: _notifying(engine), 10, "the idle relay to turn the flag on")
    return produce(engine, arrivals)


def _notifying(engine: sa.Engine) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(sa.text(FLAG)).scalar_one() == 1)


def test_dispatch_loop_keeps_p99_under_100ms_at_200_events_a_second(
    pg_url: str, engine: sa.Engine, amqp_url: str, exchange_name: str, tmp_path: Path
) -> None:
    """`relay dispatch --loop`, default tick: 1,000 plain-SQL commits at 200/s, p99 < 100 ms."""
    env = fleet_env(pg_url, amqp_url, exchange_name, tick_seconds=TICK_SECONDS)
    fleet = Fleet(env, tmp_path)
    try:
        (worker,) = fleet.start(1)
        wait_until(lambda: "listening on relay_outbox" in worker.log(), 30, "the listener")
        with Arrivals(amqp_url, exchange_name) as arrivals:
            measured = measure(engine, arrivals)
        fleet.assert_alive()
    finally:
        codes = fleet.stop()
    assert set(codes.values()) == {0}, fleet.logs()
    p99 = percentile(measured, 0.99)
    print(
        f"dispatch --loop at {RATE} ev/s: p50 {measured[len(measured) // 2] * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms"
    )
    assert p99 < 0.1, p99


def test_celery_fleet_keeps_p99_under_100ms_at_200_events_a_second(
    pg_url: str, engine: sa.Engine, amqp_url: str, exchange_name: str, tmp_path: Path
) -> None:
    """Beat (its one listener) + 2 workers, default tick: 1,000 plain-SQL commits at 200/s,
    p99 < 100 ms."""
    env = relay_env(
        database_url=pg_url,
        broker_url=amqp_url,
        exchange=exchange_name,
        queue=celery_fleet.unique_queue(),
        tick_seconds=TICK_SECONDS,
    )
    with celery_fleet.fleet(env, tmp_path) as f:
        f.worker("w1")
        f.worker("w2")
        f.beat().wait_for_log("listening on relay_outbox")
        with Arrivals(amqp_url, exchange_name) as arrivals:
            measured = measure(engine, arrivals)
    p99 = percentile(measured, 0.99)
    print(
        f"celery fleet at {RATE} ev/s: p50 {measured[len(measured) // 2] * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms"
    )
    assert p99 < 0.1, p99
