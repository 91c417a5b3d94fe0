"""Commit-to-consumer latency with the wake-up off: ``relay dispatch --loop`` only polls, every
``RELAY_TICK_SECONDS`` while the outbox is empty.

A producer process commits a transaction every 10 ms holding ``rate / 100`` events (one
multi-row INSERT), noting the wall-clock time each commit returned; a consumer process notes the
time each message arrived. Latency = arrival - commit, per event, on one machine's clock.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

import kombu
import sqlalchemy as sa

from bench import fixtures, procs, rows
from bench.drain import Workload
from bench.stats import percentile
from relay.schema import outbox

PERIOD = 0.01


def _produce(url: str, rate: int, seconds: float, out: Any) -> None:
    engine = sa.create_engine(url)
    per_txn = max(1, round(rate * PERIOD))
    period = per_txn / rate
    commits: list[tuple[int, float]] = []
    start = time.perf_counter()
    n = 0
    while (due := start + n * period) < start + seconds:
        time.sleep(max(0.0, due - time.perf_counter()))
        values = [
            {"event_type": rows.EVENT_TYPE, "payload": rows.payload(n * per_txn + i)}
            for i in range(per_txn)
        ]
        with engine.begin() as conn:
            stmt = sa.insert(outbox).values(values).returning(outbox.c.id)
            ids = list(conn.execute(stmt).scalars())
        committed = time.time()
        commits.extend((i, committed) for i in ids)
        n += 1
    engine.dispose()
    out.put({"commits": commits, "seconds": time.perf_counter() - start})


def _consume(route: fixtures.Route, stop: Any, out: Any) -> None:
    arrivals: list[tuple[int, float]] = []

    def on_message(body: Any, message: Any) -> None:
        arrivals.append((int(message.properties["message_id"]), time.time()))

    exchange = kombu.Exchange(route.exchange_name, type="topic", durable=True)
    queue = kombu.Queue(route.queue_name, exchange, routing_key="#", durable=True)
    with (
        kombu.Connection(route.url) as conn,
        conn.Consumer(queue, callbacks=[on_message], no_ack=True, accept=["json"]),
    ):
        out.put("ready")
        while not stop.is_set():
            try:
                conn.drain_events(timeout=0.2)
            except TimeoutError:
                continue
    out.put(arrivals)


def one_load(
    database_url: str, route: fixtures.Route, rate: int, seconds: float, tick: float
) -> dict[str, Any]:
    """Offer ``rate`` events/s for ``seconds`` to one relay process polling every ``tick``."""
    ctx = mp.get_context("spawn")
    engine = sa.create_engine(database_url)
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE outbox"))
    route.purge()
    work = Workload(procs.relay_command(), procs.RELAY_READY, 1, 100, database_url, route)
    env = {**work.env(), "RELAY_TICK_SECONDS": str(tick)}
    stop, consumed, produced = ctx.Event(), ctx.Queue(), ctx.Queue()
    consumer = ctx.Process(target=_consume, args=(route, stop, consumed), daemon=True)
    producer = ctx.Process(target=_produce, args=(database_url, rate, seconds, produced))
    try:
        with procs.workers(work.argv, env, 1, ready=work.ready):
            consumer.start()
            consumed.get(timeout=60)
            producer.start()
            made = produced.get(timeout=seconds + 120)
            producer.join(timeout=30)
            deadline = time.monotonic() + 60
            while rows.unfinished(engine) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
            stop.set()
            arrivals = consumed.get(timeout=60)
            consumer.join(timeout=30)
    finally:
        stop.set()
        for p in (producer, consumer):
            if p.is_alive():
                p.terminate()
                p.join(timeout=10)
        engine.dispose()
        route.purge()
    return _summary(made, arrivals, rate, tick)


def _summary(
    made: dict[str, Any], arrivals: list[tuple[int, float]], rate: int, tick: float
) -> dict[str, Any]:
    committed = dict(made["commits"])
    latencies = sorted(t - committed[i] for i, t in arrivals if i in committed)
    ms = [x * 1000 for x in latencies]
    return {
        "offered_rate": rate,
        "achieved_rate": len(committed) / made["seconds"],
        "tick_seconds": tick,
        "events": len(committed),
        "received": len(arrivals),
        "p50_ms": percentile(ms, 0.50),
        "p95_ms": percentile(ms, 0.95),
        "p99_ms": percentile(ms, 0.99),
        "max_ms": ms[-1] if ms else float("nan"),
    }


def run(amqp_url: str, rates: list[int], ticks: list[float], seconds: float) -> dict[str, Any]:
    """Every (tick, rate) pair, one relay process, batch size 100."""
    out: dict[str, Any] = {}
    with fixtures.database("latency") as url, fixtures.route(amqp_url, "latency") as route:
        for tick in ticks:
            for rate in rates:
                out[f"tick{tick:g}_r{rate}"] = one_load(url, route, rate, seconds, tick)
    return out
