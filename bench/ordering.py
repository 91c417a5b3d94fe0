"""Per-key ordering: what keys cost the relay and what the fence costs producers, on PostgreSQL
and MariaDB.

- **Drain**: N events over 1, 10 and 100 keys against the same events without keys, 4
  ``relay dispatch --loop`` processes, batch 100, in the same run, the cases interleaved. The
  events commit at once (numbered as ``relay.enqueue`` numbers them) and the drain clock of
  :mod:`bench.timing` times them. Nobody consumes the queue meanwhile (a consumer on 2 cores
  costs as much CPU as the relays); its depth is checked afterwards.
- **Producer**: enqueue transactions per second (one event, then commit) without a key, with a
  key drawn from 100 and with one shared key, from 1 and 4 producer processes starting together.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from bench import procs, rows, services
from bench.timing import Workload, drain_once
from relay.store.engine import create_engine
from relay.store.schema.tables import outbox, outbox_progress, outbox_sequence

BACKENDS = ("postgresql", "mariadb")
KEYS = [0, 1, 10, 100]  # 0: without keys
DISPATCHERS = 4
BATCH = 100
PRODUCERS = [1, 4]
PRODUCER_MODES = ("unkeyed", "100 keys", "one key")


def _keyed_inserter(keys: int) -> Any:
    def insert(engine: sa.Engine, count: int) -> None:
        """``count`` events in one transaction, numbered per key the way ``relay.enqueue``
        numbers them (the documented plain-SQL path), over ``keys`` keys round-robin."""
        payload = {"order": 1, "sku": "ABC-123", "qty": 2, "note": "x" * 120}
        events: list[dict[str, Any]] = []
        for i in range(count):
            row: dict[str, Any] = {"event_type": "bench.ordering", "payload": payload}
            if keys:
                row.update(ordering_key=f"key-{i % keys}", seq=i // keys + 1)
            events.append(row)
        with engine.begin() as conn:
            if keys:
                last = {f"key-{k}": (count - k + keys - 1) // keys for k in range(keys)}
                conn.execute(
                    sa.insert(outbox_sequence),
                    [{"ordering_key": k, "last_seq": n} for k, n in last.items()],
                )
                conn.execute(
                    sa.insert(outbox_progress), [{"ordering_key": k, "sent_seq": 0} for k in last]
                )
            for start in range(0, count, 2_000):
                conn.execute(sa.insert(outbox), events[start : start + 2_000])

    return insert


def drain_rates(url: str, reps: int, count: int) -> dict[str, Any]:
    """Events/s per number of keys (``"0"``: without keys), the same run and fleet for all."""
    engine = create_engine(url)
    rates: dict[int, list[float]] = {k: [] for k in KEYS}
    delivered: dict[int, list[int]] = {k: [] for k in KEYS}
    try:
        with services.route(services.AMQP_URL, "ordering") as route:
            work = Workload(
                procs.relay_command(), procs.RELAY_READY, DISPATCHERS, BATCH, url, route
            )
            with procs.workers(work.argv, work.env(), DISPATCHERS, ready=work.ready) as running:
                drain_once(engine, 200, running)  # connect and warm up outside the clock
                route.purge()
                for _ in range(reps):
                    for keys in KEYS:  # interleaved, so drift in the machine hits every case
                        rows.clear(engine)
                        insert = _keyed_inserter(keys)
                        rates[keys].append(
                            drain_once(engine, count, running, insert=insert)["rate"]
                        )
                        delivered[keys].append(route.purge())
    finally:
        engine.dispose()
    out: dict[str, Any] = {}
    base = statistics.median(rates[0])
    for keys in KEYS:
        med = statistics.median(rates[keys])
        out[str(keys)] = {
            "median": round(med),
            "runs": [round(r) for r in rates[keys]],
            "vs_unkeyed": round(med / base, 2),
            "delivered": delivered[keys],
        }
    return out


def _produce(url: str, mode: str, seconds: float, ready: Any, out: Any) -> None:
    engine = create_engine(url, pool_size=1)
    with engine.connect() as conn:  # connect before the clock starts
        conn.execute(sa.text("SELECT 1"))
    ready.wait()  # every producer starts together
    n = 0
    end = time.perf_counter() + seconds
    try:
        while time.perf_counter() < end:
            key = None if mode == "unkeyed" else "hot" if mode == "one key" else f"k{n % 100}"
            for _ in range(5):
                try:
                    with Session(engine) as session, session.begin():
                        relay.enqueue(session, "bench.produce", {"n": n}, ordering_key=key)
                    break
                except sa.exc.OperationalError as exc:  # a MySQL deadlock victim: retry
                    if "deadlock" not in str(exc.orig).lower():
                        raise
            n += 1
    finally:
        engine.dispose()
    out.put(n)


def producer_rates(url: str, seconds: float, rounds: int) -> dict[str, Any]:
    """Enqueue transactions/s per mode and number of producer processes: the median of
    ``rounds`` rounds, the modes taking turns within each round."""
    ctx = multiprocessing.get_context("spawn")
    engine = create_engine(url)
    rates: dict[str, list[float]] = {}
    try:
        for _ in range(rounds):
            for producers in PRODUCERS:
                for mode in PRODUCER_MODES:
                    rows.clear(engine)
                    queue, ready = ctx.Queue(), ctx.Barrier(producers + 1, timeout=120)
                    started = [
                        ctx.Process(target=_produce, args=(url, mode, seconds, ready, queue))
                        for _ in range(producers)
                    ]
                    for p in started:
                        p.start()
                    ready.wait()
                    total = sum(queue.get(timeout=seconds + 120) for _ in started)
                    for p in started:
                        p.join(timeout=30)
                    rates.setdefault(f"p{producers} {mode}", []).append(total / seconds)
    finally:
        rows.clear(engine)
        engine.dispose()
    return {name: round(statistics.median(r)) for name, r in rates.items()}


def run(count: int, reps: int, producer_seconds: float) -> dict[str, Any]:
    """The ``ordering`` section: both backends, drain and producers."""
    data: dict[str, Any] = {"events": count, "dispatchers": DISPATCHERS, "batch": BATCH}
    data.update(rounds=reps, producer_seconds=producer_seconds)
    for backend in BACKENDS:
        with services.database("ordering", backend) as url:
            data[backend] = {
                "drain": drain_rates(url, reps, count),
                "producer": producer_rates(url, producer_seconds, reps),
            }
    return data
