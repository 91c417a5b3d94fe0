"""Commit-to-consumer latency for every producer at default settings (issue 16), and the idle
CPU of the relay processes.

Self-contained (its own databases, relay processes, producer and report section), so it runs
alone: ``python -m bench --only wakeup`` or ``python -m bench.wakeup [--quick]``.

For each database (PostgreSQL with LISTEN/NOTIFY; PostgreSQL with ``RELAY_NOTIFY=0``, polling;
MariaDB, polling) and each runner (2 x ``relay dispatch --loop``; beat + 2 Celery workers, solo
pool), with nothing set but the URLs, exchange and queue (so ``RELAY_TICK_SECONDS=1``):

- **Idle CPU**: the relay processes' user + system CPU over a quiet interval, as a share of one
  core (``/proc/<pid>/stat``).
- **Latency**: a producer process commits a transaction every 5 ms holding ``rate / 200`` rows
  (one row at 200 ev/s), written as plain SQL (one multi-row ``INSERT``), through
  ``relay.enqueue`` on a Core connection, or through ``relay.enqueue`` on an ORM Session; no
  after-commit wake-up is wired (the trigger or the poll has to find them). It notes
  ``time.monotonic()`` just before each COMMIT; a consumer thread here notes each arrival on the
  same system-wide clock.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import queue
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kombu
import sqlalchemy as sa
from sqlalchemy.orm import Session

from bench import procs
from bench.stats import percentile

ADMIN_URLS = {
    "postgresql": os.environ.get(
        "BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    ),
    "mariadb": os.environ.get("BENCH_MARIADB_URL", "mysql+pymysql://root@127.0.0.1:3306/mysql"),
}
AMQP_URL = os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
CELERY = str(Path(sys.executable).with_name("celery"))
#: (label, admin URL key, extra RELAY_* settings).
DATABASES = [
    ("postgresql", "postgresql", {}),
    ("postgresql, RELAY_NOTIFY=0", "postgresql", {"RELAY_NOTIFY": "0"}),
    ("mariadb", "mariadb", {}),
]
RUNNERS = ["2 x relay dispatch --loop", "beat + 2 Celery workers"]
STYLES = ["plain SQL", "enqueue, Core", "enqueue, Session"]
RATES = [200, 2_000]
COMMIT_PERIOD_SECONDS = 0.005
#: Targets of issue 16, p99 in ms at 200 ev/s, and idle CPU as % of a core.
P99_TARGET_MS = {"postgresql": 100, "mariadb": 300}
IDLE_CPU_TARGET = 5.0
TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def database(backend: str) -> Iterator[str]:
    """A fresh migrated database on ``backend``; dropped at exit."""
    from relay import migrate

    name = f"relay_bench_wakeup_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(ADMIN_URLS[backend], isolation_level="AUTOCOMMIT")
    quote = '"' if backend == "postgresql" else "`"
    force = " WITH (FORCE)" if backend == "postgresql" else ""
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {quote}{name}{quote}"))
        url = sa.make_url(ADMIN_URLS[backend]).set(database=name).render_as_string(False)
        migrate.upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {quote}{name}{quote}{force}"))
        admin.dispose()


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes used so far."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS_PER_SECOND


@contextlib.contextmanager
def runner(kind: str, env: dict[str, str]) -> Iterator[list[int]]:
    """The relay processes of ``kind``, ready; yields their pids."""
    if kind == RUNNERS[0]:
        with procs.workers(procs.relay_command(), env, 2, ready=procs.RELAY_READY) as ps:
            yield [p.pid for p in ps]
        return
    tasks = env["RELAY_QUEUE"]
    common = ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"]
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        beat = [CELERY, "-A", "relay", "beat", "-l", "INFO", "-s", f"{tmp}/schedule"]
        pids = [p.pid for p in stack.enter_context(procs.workers(beat, env, 1, ready="Starting"))]
        for i in range(2):
            argv = [CELERY, "-A", "relay", "worker", "-n", f"w{i}.{tasks}@%h", "-Q", tasks]
            started = procs.workers([*argv, "--pool", "solo", *common], env, 1, ready=" ready.")
            pids += [p.pid for p in stack.enter_context(started)]
        try:
            yield pids
        finally:
            stack.close()
            with kombu.Connection(AMQP_URL) as conn, contextlib.suppress(Exception):
                kombu.Queue(tasks, channel=conn.default_channel).delete()


class Arrivals:
    """Consumes a queue bound to the exchange, in a thread: when each outbox id arrived."""

    def __init__(self, exchange: str) -> None:
        self.exchange = exchange
        self.at: dict[int, float] = {}
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Arrivals:
        self._thread.start()
        if not self.ready.wait(30):
            raise RuntimeError("consumer not ready")
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        exchange = kombu.Exchange(self.exchange, type="topic", durable=True)
        bound = kombu.Queue(f"{self.exchange}.q", exchange, routing_key="#", auto_delete=True)

        def on_message(body: Any, message: Any) -> None:
            self.at.setdefault(int(message.properties["message_id"]), time.monotonic())

        with (
            kombu.Connection(AMQP_URL) as conn,
            # Auto-ack: an ack round trip per message would make the consumer the bottleneck.
            conn.Consumer([bound], callbacks=[on_message], no_ack=True, accept=["json"]),
        ):
            self.ready.set()
            while not self._stop.is_set():
                try:
                    conn.drain_events(timeout=0.1)
                except TimeoutError:
                    continue

    def wait_for(self, ids: list[int], timeout: float) -> int:
        """Wait (bounded) until every id arrived; returns how many never did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            missing = sum(i not in self.at for i in ids)
            if not missing:
                return 0
            time.sleep(0.02)
        return sum(i not in self.at for i in ids)


def _commit(
    engine: sa.Engine, style: str, payloads: list[dict[str, Any]]
) -> tuple[list[int], float]:
    """One transaction of ``payloads`` written in ``style``; their ids and the time just before
    COMMIT."""
    import relay
    from relay.schema import outbox

    if style == "plain SQL":
        with engine.connect() as conn:
            rows = [{"event_type": "bench.wakeup", "payload": p} for p in payloads]
            ids = list(conn.execute(sa.insert(outbox).returning(outbox.c.id), rows).scalars())
            began = time.monotonic()
            conn.commit()
        return ids, began
    if style == "enqueue, Core":
        with engine.connect() as conn:
            transaction = conn.begin()
            ids = [relay.enqueue(conn, "bench.wakeup", p) for p in payloads]
            began = time.monotonic()
            transaction.commit()
        return ids, began
    with Session(engine) as session:
        ids = [relay.enqueue(session, "bench.wakeup", p) for p in payloads]
        began = time.monotonic()
        session.commit()
    return ids, began


def _produce(url: str, style: str, rate: int, seconds: float, out: Any) -> None:
    """The producer process: a transaction every 5 ms holding ``rate / 200`` events."""
    from relay.engine import create_engine

    engine = create_engine(url)
    per_txn = max(1, round(rate * COMMIT_PERIOD_SECONDS))
    committed: list[tuple[int, float]] = []
    start = time.monotonic()
    n = 0
    while (due := start + n * COMMIT_PERIOD_SECONDS) < start + seconds:
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)  # pacing of the producer, not synchronization
        ids, began = _commit(engine, style, [{"n": n, "i": i} for i in range(per_txn)])
        committed += [(i, began) for i in ids]
        n += 1
    elapsed = time.monotonic() - start
    engine.dispose()
    out.put({"committed": committed, "seconds": elapsed})


def one_load(
    url: str, arrivals: Arrivals, pids: list[int], style: str, rate: int, seconds: float
) -> dict[str, Any]:
    """Latency percentiles (ms) of one producer style at one offered rate."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    producer = ctx.Process(target=_produce, args=(url, style, rate, seconds, out))
    cpu_before, wall_before = cpu_seconds(pids), time.monotonic()
    producer.start()
    deadline = time.monotonic() + seconds + 120
    try:
        while True:
            try:
                made = out.get(timeout=1.0)
                break
            except queue.Empty:
                if not producer.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"the {style} producer failed") from None
    finally:
        producer.join(timeout=30)
    committed = dict(made["committed"])
    lost = arrivals.wait_for(list(committed), 60)
    cpu = (cpu_seconds(pids) - cpu_before) / (time.monotonic() - wall_before) * 100
    ms = sorted((arrivals.at[i] - t) * 1000 for i, t in committed.items() if i in arrivals.at)
    return {
        "style": style,
        "rate": rate,
        "achieved_per_s": round(len(committed) / made["seconds"]),
        "events": len(committed),
        "lost": lost,
        "p50_ms": round(percentile(ms, 0.50), 1),
        "p95_ms": round(percentile(ms, 0.95), 1),
        "p99_ms": round(percentile(ms, 0.99), 1),
        "max_ms": round(ms[-1], 1),
        "relay_cpu_pct": round(cpu, 1),
    }


def measure(
    label: str,
    backend: str,
    extra: dict[str, str],
    kind: str,
    seconds: float,
    idle: float,
    styles: list[str],
    rates: list[int],
) -> dict[str, Any]:
    """Idle CPU, then every (style, rate), of one runner on one fresh database."""
    with database(backend) as url:
        exchange = f"bench.wakeup.{uuid.uuid4().hex[:8]}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        env.update(
            RELAY_DATABASE_URL=url,
            RELAY_BROKER_URL=AMQP_URL,
            RELAY_EXCHANGE=exchange,
            RELAY_QUEUE=f"bench.wakeup.tasks.{uuid.uuid4().hex[:8]}",
            **extra,
        )
        from relay.engine import create_engine

        engine = create_engine(url)
        try:
            with Arrivals(exchange) as arrivals, runner(kind, env) as pids:
                warm = [_commit(engine, "plain SQL", [{"warm": i}])[0][0] for i in range(4)]
                if arrivals.wait_for(warm, 30):
                    raise RuntimeError(f"{label} / {kind}: warm-up events never arrived")
                time.sleep(2.0)  # let the polls back off to the tick before timing idle
                cpu_before, wall_before = cpu_seconds(pids), time.monotonic()
                time.sleep(idle)  # the idle interval measured, not synchronization
                idle_pct = (cpu_seconds(pids) - cpu_before) / (time.monotonic() - wall_before)
                loads = [
                    one_load(url, arrivals, pids, style, rate, seconds)
                    for rate in rates
                    for style in styles
                ]
        finally:
            engine.dispose()
    return {
        "database": label,
        "runner": kind,
        "idle_cpu_pct": round(idle_pct * 100, 2),
        "idle_seconds": idle,
        "loads": loads,
    }


def run(plan: Any) -> dict[str, Any]:
    """The ``wakeup`` section of ``python -m bench``."""
    quick = getattr(plan, "name", "") == "quick"
    seconds, idle = (2.0, 3.0) if quick else (10.0, 20.0)
    results = []
    for label, backend, extra in DATABASES:
        for kind in RUNNERS:
            styles = STYLES if not extra else STYLES[:1]
            rates = RATES[:1] if quick else RATES
            results.append(measure(label, backend, extra, kind, seconds, idle, styles, rates))
    return {"seconds": seconds, "commit_period_s": COMMIT_PERIOD_SECONDS, "runs": results}


def _verdict(database: str, rate: int, p99: float) -> str:
    target = P99_TARGET_MS["mariadb" if database.startswith("mariadb") else "postgresql"]
    if rate != RATES[0] or database.endswith("=0"):
        return ""
    return f"< {target}: " + ("met" if p99 < target else "**missed**")


def render(data: dict[str, Any]) -> str:
    """The report's section on wake-up latency (Markdown)."""
    lines = [
        "## Wake-up latency for every producer (`bench/wakeup.py`)",
        "",
        f"Default settings (`RELAY_TICK_SECONDS=1`, `RELAY_POLL_FLOOR_SECONDS=0.025`); a"
        f" transaction every {data['commit_period_s'] * 1000:g} ms holding rate/200 rows, for"
        f" {data['seconds']:g} s per row of the table; commit-to-consumer latency in ms on one"
        " clock; no after-commit wake-up wired in the producer. Relay CPU is the relay"
        " processes' CPU (all of them) as % of one core during the load. Targets (issue 16):"
        f" p99 at 200 ev/s under {P99_TARGET_MS['postgresql']} ms on PostgreSQL and"
        f" {P99_TARGET_MS['mariadb']} ms on MariaDB; idle CPU under {IDLE_CPU_TARGET:g}%.",
        "",
        "| database | relay runs as | idle CPU | producer | ev/s | p50 | p95 | p99 | max"
        " | relay CPU | target |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in data["runs"]:
        idle = run["idle_cpu_pct"]
        idle_cell = f"{idle:g}%" + ("" if idle < IDLE_CPU_TARGET else " **over**")
        for load in run["loads"]:
            verdict = _verdict(run["database"], load["rate"], load["p99_ms"])
            lost = f" ({load['lost']} lost)" if load["lost"] else ""
            lines.append(
                f"| {run['database']} | {run['runner']} | {idle_cell} | {load['style']}"
                f" | {load['rate']:,} ({load['achieved_per_s']:,}){lost} | {load['p50_ms']:g}"
                f" | {load['p95_ms']:g} | {load['p99_ms']:g} | {load['max_ms']:g}"
                f" | {load['relay_cpu_pct']:g}% | {verdict} |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wakeup", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    plan = argparse.Namespace(name="quick" if args.quick else "full")
    print(render(run(plan)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
