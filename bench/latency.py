"""Commit-to-consumer latency through the Celery fleet (beat at 5 s), with and without the
after-commit wake-up: p50/p99 over 200 single-event commits (1 worker), and p50/p95/p99 at
offered loads of 100, 1,000 and 5,000 events/s (2 workers; a transaction every 10 ms carrying
rate/100 events).

Events are written through ``Producer.enqueue``; a consumer thread timestamps each delivery.
The latency of an event runs from just before its COMMIT to its arrival at the consumer, on one
monotonic clock.

    python -m bench.latency [--quick]
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import kombu
from celery import Celery
from sqlalchemy.orm import Session

from bench import fixtures, services
from bench.fleet import celery_env, celery_fleet
from bench.stats import percentile
from relay.celery import Waker, celery_config
from relay.config import Settings
from relay.engine import create_engine
from relay.producer import Producer

TICK_SECONDS = 5.0
INTERVAL_SECONDS = 0.05


class _Arrivals:
    """Consumes the route's queue in a thread, recording when each outbox id arrived."""

    def __init__(self, route: fixtures.Route) -> None:
        self.route = route
        self.at: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Arrivals:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _on_message(self, body: Any, msg: Any) -> None:
        self.at.setdefault(int(msg.properties["message_id"]), time.monotonic())

    def _run(self) -> None:
        exchange = kombu.Exchange(self.route.exchange_name, type="topic", durable=True)
        queue = kombu.Queue(self.route.queue_name, exchange, routing_key="#", durable=True)
        with (
            kombu.Connection(self.route.url) as conn,
            # Auto-ack: a per-message ack round trip would make the consumer, not the relay, the
            # bottleneck at thousands of events per second.
            conn.Consumer([queue], callbacks=[self._on_message], accept=["json"], no_ack=True),
        ):
            while not self._stop.is_set():
                try:
                    conn.drain_events(timeout=0.2)
                except TimeoutError:
                    continue

    def wait_for(self, ids: list[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not all(i in self.at for i in ids):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{sum(i not in self.at for i in ids)} events never arrived")
            time.sleep(0.01)


class _Bench:
    """A running fleet with a producer whose commits can wake it, and a timed consumer."""

    def __init__(self, producer: Producer, engine: Any, arrivals: _Arrivals) -> None:
        self.producer, self.engine, self.arrivals = producer, engine, arrivals

    def commit(
        self, payloads: list[dict[str, Any]], style: str = "session"
    ) -> tuple[list[int], float]:
        """Enqueue ``payloads`` in one transaction, through an ORM Session or (``style="core"``)
        a Core ``engine.begin()`` connection; returns their ids and when COMMIT began."""
        if style == "core":
            with self.engine.connect() as conn:
                transaction = conn.begin()
                ids = [self.producer.enqueue(conn, "bench.latency", p) for p in payloads]
                began = time.monotonic()
                transaction.commit()
            return ids, began
        with Session(self.engine) as session:
            ids = [self.producer.enqueue(session, "bench.latency", p) for p in payloads]
            began = time.monotonic()
            session.commit()
        return ids, began


@contextlib.contextmanager
def _bench(label: str, wakeup: bool, workers: int) -> Iterator[_Bench]:
    """Database, route, ``workers`` Celery workers plus beat at ``TICK_SECONDS``, a consumer,
    and one event already delivered (the fleet is warm when the clock starts)."""
    amqp_url = services.AMQP_URL
    with fixtures.database(label) as db, fixtures.route(amqp_url, label) as route:
        env = celery_env(db, amqp_url, route.exchange_name, tick_seconds=TICK_SECONDS)
        settings = Settings.from_env(env)
        app = Celery(f"bench-{label}")
        app.conf.update(celery_config(settings))
        producer = Producer(wake=Waker(app, settings) if wakeup else None)
        engine = create_engine(db)
        try:
            with celery_fleet(env, workers), _Arrivals(route) as arrivals:
                bench = _Bench(producer, engine, arrivals)
                warm, _ = bench.commit([{"n": -1}])
                arrivals.wait_for(warm, 60)
                yield bench
        finally:
            engine.dispose()


def _latencies(bench: _Bench, committed: dict[int, float]) -> list[float]:
    return sorted(bench.arrivals.at[i] - t for i, t in committed.items())


def measure(wakeup: bool, events: int = 200, style: str = "session") -> dict[str, Any]:
    """Latency percentiles (seconds) of ``events`` single-event commits written through a
    Session or (``style="core"``) a Core connection."""
    committed: dict[int, float] = {}
    with _bench("latency", wakeup, workers=1) as bench:
        for n in range(events):
            (event_id,), began = bench.commit([{"n": n}], style)
            committed[event_id] = began
            time.sleep(INTERVAL_SECONDS)  # pacing of the producer, not synchronization
        bench.arrivals.wait_for(list(committed), TICK_SECONDS * 3 + 30)
        latencies = _latencies(bench, committed)
    return {
        "wakeup": wakeup,
        "style": style,
        "events": events,
        "p50_s": round(percentile(latencies, 0.50), 4),
        "p99_s": round(percentile(latencies, 0.99), 4),
        "max_s": round(latencies[-1], 4),
    }


#: Offered loads (events/s) and the producer's commit period.
RATES = (100, 1000, 5000)
COMMIT_PERIOD_SECONDS = 0.01


def measure_load(
    rate: int, wakeup: bool, seconds: float, workers: int = 2, style: str = "session"
) -> dict[str, Any]:
    """Latency percentiles (ms) at ``rate`` events/s offered for ``seconds``, written through a
    Session or (``style="core"``) a Core connection."""
    per_commit = max(1, round(rate * COMMIT_PERIOD_SECONDS))
    committed: dict[int, float] = {}
    with _bench("latload", wakeup, workers) as bench:
        start = time.monotonic()
        slot = 0
        while time.monotonic() - start < seconds:
            ids, began = bench.commit([{"n": slot, "i": i} for i in range(per_commit)], style)
            committed.update(dict.fromkeys(ids, began))
            slot += 1
            pause = start + slot * COMMIT_PERIOD_SECONDS - time.monotonic()
            if pause > 0:
                time.sleep(pause)  # pacing of the producer, not synchronization
        achieved = len(committed) / (time.monotonic() - start)
        bench.arrivals.wait_for(list(committed), TICK_SECONDS * 3 + 60)
        latencies = _latencies(bench, committed)
    return {
        "rate": rate,
        "wakeup": wakeup,
        "style": style,
        "achieved_per_s": round(achieved),
        "events": len(latencies),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 1),
        "p95_ms": round(percentile(latencies, 0.95) * 1000, 1),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "max_ms": round(latencies[-1] * 1000, 1),
    }


def run(quick: bool = False) -> dict[str, Any]:
    """Commit-to-consumer latency with and without the wake-up, beat at 5 s: single commits,
    then at offered loads."""
    events = 40 if quick else 200
    seconds = 1.0 if quick else 5.0
    rates = RATES[:2] if quick else RATES
    return {
        "tick_seconds": TICK_SECONDS,
        "interval_seconds": INTERVAL_SECONDS,
        "with_wakeup": measure(True, events),
        "with_wakeup_core": measure(True, events, style="core"),
        "without_wakeup": measure(False, events),
        "under_load": [
            measure_load(rate, wakeup, seconds) for rate in rates for wakeup in (True, False)
        ],
        # The wake-up through Core connections (engine.connect()/begin()), as issue 9 measured.
        "under_load_core": [measure_load(rate, True, seconds, style="core") for rate in rates],
        "loadavg": services.loadavg(),
    }


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
