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

import json
import sys
import threading
import time
from typing import Any

import kombu
from celery import Celery
from sqlalchemy.orm import Session

from bench import fixtures, services
from bench.fleet import celery_env, celery_fleet
from bench.stats import percentile
from relay.celery import Waker, celery_config
from relay.config import Settings
from relay.producer import Producer
from relay.store import create_engine

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


def measure(wakeup: bool, events: int = 200) -> dict[str, Any]:
    """Latency percentiles (seconds) of ``events`` single-event commits."""
    amqp_url = services.AMQP_URL
    with fixtures.database("latency") as db, fixtures.route(amqp_url, "latency") as route:
        env = celery_env(db, amqp_url, route.exchange_name, tick_seconds=TICK_SECONDS)
        settings = Settings.from_env(env)
        app = Celery("bench-latency")
        app.conf.update(celery_config(settings))
        producer = Producer(wake=Waker(app, settings) if wakeup else None)
        engine = create_engine(db)

        def commit_one(n: int) -> tuple[int, float]:
            with Session(engine) as session:
                event_id = producer.enqueue(session, "bench.latency", {"n": n})
                started = time.monotonic()
                session.commit()
            return event_id, started

        try:
            with celery_fleet(env, 1), _Arrivals(route) as arrivals:
                warm_id, _ = commit_one(-1)
                arrivals.wait_for([warm_id], 60)
                committed: dict[int, float] = {}
                for n in range(events):
                    event_id, started = commit_one(n)
                    committed[event_id] = started
                    time.sleep(INTERVAL_SECONDS)  # pacing of the producer, not synchronization
                arrivals.wait_for(list(committed), TICK_SECONDS * 3 + 30)
        finally:
            engine.dispose()
    latencies = sorted(arrivals.at[i] - t for i, t in committed.items())
    return {
        "wakeup": wakeup,
        "events": events,
        "p50_s": round(percentile(latencies, 0.50), 4),
        "p99_s": round(percentile(latencies, 0.99), 4),
        "max_s": round(latencies[-1], 4),
    }


#: Offered loads (events/s) and the producer's commit period.
RATES = (100, 1000, 5000)
COMMIT_PERIOD_SECONDS = 0.01


def measure_load(rate: int, wakeup: bool, seconds: float, workers: int = 2) -> dict[str, Any]:
    """Latency percentiles (ms) at ``rate`` events/s offered for ``seconds``."""
    per_commit = max(1, round(rate * COMMIT_PERIOD_SECONDS))
    amqp_url = services.AMQP_URL
    with fixtures.database("latload") as db, fixtures.route(amqp_url, "latload") as route:
        env = celery_env(db, amqp_url, route.exchange_name, tick_seconds=TICK_SECONDS)
        settings = Settings.from_env(env)
        app = Celery("bench-latency-load")
        app.conf.update(celery_config(settings))
        producer = Producer(wake=Waker(app, settings) if wakeup else None)
        engine = create_engine(db)
        committed: dict[int, float] = {}
        try:
            with celery_fleet(env, workers), _Arrivals(route) as arrivals:
                with Session(engine) as session:
                    warm_id = producer.enqueue(session, "bench.latency", {"n": -1})
                    session.commit()
                arrivals.wait_for([warm_id], 60)
                start = time.monotonic()
                slot = 0
                while time.monotonic() - start < seconds:
                    with Session(engine) as session:
                        ids = [
                            producer.enqueue(session, "bench.latency", {"n": slot, "i": i})
                            for i in range(per_commit)
                        ]
                        began = time.monotonic()
                        session.commit()
                    committed.update(dict.fromkeys(ids, began))
                    slot += 1
                    pause = start + slot * COMMIT_PERIOD_SECONDS - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)  # pacing of the producer, not synchronization
                achieved = len(committed) / (time.monotonic() - start)
                arrivals.wait_for(list(committed), TICK_SECONDS * 3 + 60)
        finally:
            engine.dispose()
    latencies = sorted(arrivals.at[i] - t for i, t in committed.items())
    return {
        "rate": rate,
        "wakeup": wakeup,
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
        "without_wakeup": measure(False, events),
        "under_load": [
            measure_load(rate, wakeup, seconds) for rate in rates for wakeup in (True, False)
        ],
        "loadavg": services.loadavg(),
    }


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
