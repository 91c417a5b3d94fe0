"""Issue 27's latency target with a wake-up that writers pay nothing for: a plain-SQL producer
committing one row every 5 ms (200 ev/s) on PostgreSQL has its events at a consumer with p99
under 100 ms, through `relay dispatch --loop` and through the Celery fleet, at the default tick
and poll floor. No trigger runs and nobody NOTIFYs: the relay's watcher sees the id sequence
move every poll floor (25 ms).

Each event's latency runs from the return of its commit (when the application's transaction is
done) to its arrival at the consumer. A window that misses the bound prints its slowest events
(when in the window, how long their commit took) and is measured once more with the same relay
running: the bound must hold in a second window, so a one-off stall of the machine (a CI run once
had one window at p99 459 ms and p50 6 ms) does not fail the suite, while a relay that is slow
in every window still does."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from bench.timing import Arrivals, percentile
from tests.support import celery_fleet
from tests.support.env import relay_env, wait_until
from tests.support.fleet import Fleet, fleet_env
from tests.support.windows import within_two

pytestmark = [pytest.mark.serial, pytest.mark.timeout(240)]

RATE = 200
SECONDS = 5.0
#: A quiet spell before each window, so that it starts on an idle relay (pacing).
QUIET_SECONDS = 0.5
#: The defaults with ``RELAY_NOTIFY`` on PostgreSQL.
TICK_SECONDS = 1.0
#: The latency target of issue 27 (p99), seconds.
BOUND = 0.1


@dataclasses.dataclass(repr=False)
class Window:
    """One measured window: each event's latency, when its commit returned (seconds into the
    window) and how long the commit took."""

    latency: dict[int, float]
    at: dict[int, float]
    commit: dict[int, float]

    @property
    def sorted(self) -> list[float]:
        return sorted(self.latency.values())

    @property
    def p99(self) -> float:
        return percentile(self.sorted, 0.99)

    def summary(self) -> str:
        values = self.sorted
        return f"p50 {values[len(values) // 2] * 1000:.0f} ms, p99 {self.p99 * 1000:.0f} ms"

    def __repr__(self) -> str:
        return f"Window({self.summary()})"

    def slowest(self, n: int = 10) -> str:
        worst = sorted(self.latency, key=self.latency.__getitem__, reverse=True)[:n]
        return "\n".join(
            f"  event at {self.at[i]:.3f} s: {self.latency[i] * 1000:.0f} ms "
            f"(its commit took {self.commit[i] * 1000:.1f} ms)"
            for i in sorted(worst, key=self.at.__getitem__)
        )


def produce(engine: sa.Engine, arrivals: Arrivals, seconds: float = SECONDS) -> Window:
    """One single-row transaction every 1/RATE s for ``seconds``; each one's latency from the
    return of its commit to its arrival."""
    committed: dict[int, float] = {}
    took: dict[int, float] = {}
    sql = sa.text("INSERT INTO outbox (event_type, payload) VALUES ('steady', '{}') RETURNING id")
    start = time.monotonic()
    with engine.connect() as conn:
        for n in range(int(RATE * seconds)):
            time.sleep(max(0.0, start + n / RATE - time.monotonic()))  # the producer's pace
            row_id = conn.execute(sql).scalar_one()
            began = time.monotonic()
            conn.commit()
            committed[row_id] = time.monotonic()
            took[row_id] = committed[row_id] - began
    assert arrivals.wait_for(list(committed), 30.0) == 0, "events missing"
    return Window(
        latency={i: arrivals.at[i] - t for i, t in committed.items()},
        at={i: t - start for i, t in committed.items()},
        commit=took,
    )


def measure(engine: sa.Engine, arrivals: Arrivals, runner: str) -> Window:
    """A second of warm-up (every relay process opens its broker channel), a quiet spell, then
    the measured load: it starts on an idle relay. A window over the bound is printed with its
    slowest events and measured once more."""
    produce(engine, arrivals, 1.0)

    def window(n: int) -> Window:
        time.sleep(QUIET_SECONDS)  # a quiet spell: the watcher rests, the workers idle
        taken = produce(engine, arrivals)
        print(f"{runner} at {RATE} ev/s, window {n}: {taken.summary()}")
        if taken.p99 >= BOUND:
            print(f"window {n} over {BOUND * 1000:.0f} ms; its slowest events:")
            print(taken.slowest())
        return taken

    return within_two(window, lambda taken: taken.p99 >= BOUND)[0]


def test_dispatch_loop_keeps_p99_under_100ms_at_200_events_a_second(
    pg_url: str, engine: sa.Engine, amqp_url: str, exchange_name: str, tmp_path: Path
) -> None:
    """`relay dispatch --loop`, default tick: 1,000 plain-SQL commits at 200/s, p99 < 100 ms."""
    env = fleet_env(pg_url, amqp_url, exchange_name, tick_seconds=TICK_SECONDS)
    fleet = Fleet(env, tmp_path)
    try:
        (worker,) = fleet.start(1)
        wait_until(lambda: "relay wake-up watching" in worker.log(), 30, "the watcher")
        with Arrivals(amqp_url, exchange_name) as arrivals:
            window = measure(engine, arrivals, "dispatch --loop")
        fleet.assert_alive()
    finally:
        codes = fleet.stop()
    assert set(codes.values()) == {0}, fleet.logs()
    assert window.p99 < BOUND, window.summary()


def test_celery_fleet_keeps_p99_under_100ms_at_200_events_a_second(
    pg_url: str, engine: sa.Engine, amqp_url: str, exchange_name: str, tmp_path: Path
) -> None:
    """Beat (its one watcher) + 2 workers, default tick: 1,000 plain-SQL commits at 200/s,
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
        f.beat().wait_for_log("relay wake-up watching")
        with Arrivals(amqp_url, exchange_name) as arrivals:
            window = measure(engine, arrivals, "celery fleet")
    assert window.p99 < BOUND, window.summary()
