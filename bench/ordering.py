"""Per-key ordering: what keys cost the relay and what the fence costs producers.

Self-contained (its own databases, workers and report section), so that it can be run alone:
``python -m bench --only ordering`` or ``python -m bench.ordering [--quick]``.

- **Drain**: 10,000 events over 1, 10 and 100 keys against the same events without keys, 4
  ``relay dispatch --loop`` processes, batch 100, in the same run. The events commit at once
  (numbered as ``relay.enqueue`` numbers them), and the rate is events over the time from that
  commit until no row is pending or processing. Nobody consumes the queue meanwhile (a consumer
  on 2 cores costs as much CPU as the relays); its depth is checked afterwards.
- **Producer**: enqueue transactions per second (one event, then commit) without a key, with a
  key drawn from 100 and with one shared key, from 1 and 4 producer processes starting together.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kombu
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay import migrate
from relay.engine import create_engine
from relay.schema import outbox, outbox_progress, outbox_sequence

ADMIN_URLS = {
    "postgresql": os.environ.get(
        "BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    ),
    "mariadb": os.environ.get("BENCH_MARIADB_URL", "mysql+pymysql://root@127.0.0.1:3306/mysql"),
}
AMQP_URL = os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
EVENTS = 10_000
KEYS = [0, 1, 10, 100]  # 0: without keys
DISPATCHERS = 4
BATCH = 100
PRODUCER_SECONDS = 3.0
PRODUCERS = [1, 4]
#: Targets from issue 10, as a share of the rate without keys.
TARGETS = {10: 0.5, 1: 0.2}


@contextlib.contextmanager
def database(backend: str) -> Iterator[str]:
    """A fresh migrated database on ``backend``; dropped at exit."""
    name = f"relay_bench_ordering_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(ADMIN_URLS[backend], isolation_level="AUTOCOMMIT")
    quote = '"' if backend == "postgresql" else "`"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {quote}{name}{quote}"))
        url = sa.make_url(ADMIN_URLS[backend]).set(database=name).render_as_string(False)
        migrate.upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            force = " WITH (FORCE)" if backend == "postgresql" else ""
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {quote}{name}{quote}{force}"))
        admin.dispose()


def _route(exchange: str) -> tuple[kombu.Exchange, kombu.Queue]:
    ex = kombu.Exchange(exchange, type="topic", durable=True)
    return ex, kombu.Queue(f"{exchange}.q", ex, routing_key="#", durable=True)


def _queue(exchange: str, action: str) -> int:
    with kombu.Connection(AMQP_URL) as conn:
        ex, queue = _route(exchange)
        bound = queue(conn.default_channel)
        if action == "declare":
            ex(conn.default_channel).declare()
            bound.declare()
            return 0
        if action == "delete":
            bound.delete()
            ex(conn.default_channel).delete()
            return 0
        return int(bound.purge() or 0)


def _reset(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for table in (outbox, outbox_sequence, outbox_progress):
            conn.execute(sa.delete(table))


def _commit_events(engine: sa.Engine, count: int, keys: int) -> None:
    """``count`` events in one transaction, numbered per key the way ``relay.enqueue`` numbers
    them (the documented plain-SQL path), over ``keys`` keys round-robin (0: no key)."""
    payload = {"order": 1, "sku": "ABC-123", "qty": 2, "note": "x" * 120}
    rows: list[dict[str, Any]] = []
    for i in range(count):
        row: dict[str, Any] = {"event_type": "bench.ordering", "payload": payload}
        if keys:
            row.update(ordering_key=f"key-{i % keys}", seq=i // keys + 1)
        rows.append(row)
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
            conn.execute(sa.insert(outbox), rows[start : start + 2_000])


def _unfinished(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        query = sa.select(sa.func.count()).where(outbox.c.status.in_(["pending", "processing"]))
        return int(conn.execute(query).scalar_one())


def _drain_once(engine: sa.Engine, keys: int, count: int, workers: list[Any]) -> float:
    _commit_events(engine, count, keys)
    committed = time.perf_counter()
    deadline = committed + 600
    while _unfinished(engine):
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{count} events over {keys} keys not drained in 600 s")
        if any(p.poll() is not None for p in workers):
            raise RuntimeError("a relay process exited")
        time.sleep(0.01)
    return count / (time.perf_counter() - committed)


@contextlib.contextmanager
def _relays(url: str, exchange: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(
        RELAY_DATABASE_URL=url,
        RELAY_BROKER_URL=AMQP_URL,
        RELAY_EVENTS_URL=AMQP_URL,
        RELAY_EXCHANGE=exchange,
        RELAY_BATCH_SIZE=str(BATCH),
        RELAY_TICK_SECONDS="0.05",
    )
    relay_bin = str(Path(sys.executable).with_name("relay"))
    logdir = Path(tempfile.mkdtemp(prefix="relay-bench-ordering-"))
    procs = [
        subprocess.Popen(
            [relay_bin, "dispatch", "--loop"],
            env=env,
            stdout=(logdir / f"w{i}.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        for i in range(DISPATCHERS)
    ]
    try:
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def drain_rates(url: str, reps: int, count: int) -> dict[str, Any]:
    """Events/s per number of keys (``"0"``: without keys), the same run and fleet for all."""
    engine = create_engine(url)
    exchange = f"bench.ordering.{uuid.uuid4().hex[:6]}"
    _queue(exchange, "declare")
    rates: dict[int, list[float]] = {k: [] for k in KEYS}
    delivered: dict[int, list[int]] = {k: [] for k in KEYS}
    try:
        with _relays(url, exchange) as workers:
            _drain_once(engine, 0, 200, workers)  # connect and warm up outside the clock
            _queue(exchange, "purge")
            for _ in range(reps):
                for keys in KEYS:  # interleaved, so drift in the machine hits every case
                    _reset(engine)
                    rates[keys].append(_drain_once(engine, keys, count, workers))
                    delivered[keys].append(_queue(exchange, "purge"))
    finally:
        _queue(exchange, "delete")
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


PRODUCER_MODES = ("unkeyed", "100 keys", "one key")


def producer_rates(url: str, seconds: float, rounds: int) -> dict[str, Any]:
    """Enqueue transactions/s per mode and number of producer processes: the median of
    ``rounds`` rounds, the modes taking turns within each round."""
    ctx = multiprocessing.get_context("spawn")
    engine = create_engine(url)
    rates: dict[str, list[float]] = {}
    try:
        for _ in range(rounds):
            for procs in PRODUCERS:
                for mode in PRODUCER_MODES:
                    _reset(engine)
                    queue, ready = ctx.Queue(), ctx.Barrier(procs + 1, timeout=120)
                    workers = [
                        ctx.Process(target=_produce, args=(url, mode, seconds, ready, queue))
                        for _ in range(procs)
                    ]
                    for w in workers:
                        w.start()
                    ready.wait()
                    total = sum(queue.get(timeout=seconds + 120) for _ in workers)
                    for w in workers:
                        w.join(timeout=30)
                    rates.setdefault(f"p{procs} {mode}", []).append(total / seconds)
    finally:
        _reset(engine)
        engine.dispose()
    return {name: round(statistics.median(r)) for name, r in rates.items()}


def run(plan: Any) -> dict[str, Any]:
    """The ``ordering`` section of ``python -m bench``: both backends, drain and producers."""
    quick = getattr(plan, "name", "") == "quick"
    reps, count = (1, 2_000) if quick else (3, EVENTS)
    seconds = 1.0 if quick else PRODUCER_SECONDS
    data: dict[str, Any] = {"events": count, "dispatchers": DISPATCHERS, "batch": BATCH}
    data.update(rounds=reps, producer_seconds=seconds)
    for backend in ADMIN_URLS:
        with database(backend) as url:
            data[backend] = {
                "drain": drain_rates(url, reps, count),
                "producer": producer_rates(url, seconds, reps),
            }
    return data


def render(data: dict[str, Any]) -> str:
    """The report's section on per-key ordering (Markdown)."""
    lines = [
        "## Per-key ordering (`bench/ordering.py`)",
        "",
        f"{data['events']:,} events committed at once, {data['dispatchers']} `relay dispatch"
        f" --loop` processes, batch {data['batch']}, RabbitMQ with confirms; medians, events/s."
        " Targets: 10 keys at 0.5x of the rate without keys or better, 1 key at 0.2x.",
        "",
        "| database | keys | events/s | runs | vs without keys | target |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for backend in ADMIN_URLS:
        for keys, row in data.get(backend, {}).get("drain", {}).items():
            target = TARGETS.get(int(keys))
            verdict = (
                ""
                if target is None
                else f"{target}x: " + ("met" if row["vs_unkeyed"] >= target else "**missed**")
            )
            label = "none" if keys == "0" else keys
            runs = ", ".join(f"{r:,}" for r in row["runs"])
            lines.append(
                f"| {backend} | {label} | {row['median']:,} | {runs} | {row['vs_unkeyed']}x"
                f" | {verdict} |"
            )
    lines += [
        "",
        "Producer cost of the fence: enqueue transactions per second (one event, then commit),"
        f" all producers starting together; the median of {data.get('rounds', 1)} rounds of"
        f" {data.get('producer_seconds', PRODUCER_SECONDS):g} s, the modes taking turns.",
        "",
        "| database | producers | unkeyed | key drawn from 100 | one shared key |",
        "| --- | --- | --- | --- | --- |",
    ]
    for backend in ADMIN_URLS:
        prod = data.get(backend, {}).get("producer", {})
        for procs in PRODUCERS:
            cells = [prod.get(f"p{procs} {m}", 0) for m in PRODUCER_MODES]
            base = cells[0] or 1
            lines.append(
                f"| {backend} | {procs} | {cells[0]:,} | {cells[1]:,} ({cells[1] / base:.2f}x)"
                f" | {cells[2]:,} ({cells[2] / base:.2f}x) |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ordering", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    plan = argparse.Namespace(name="quick" if args.quick else "full")
    print(render(run(plan)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
