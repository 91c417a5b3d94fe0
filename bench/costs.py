"""Where an event's time and CPU go, and what metrics add to them.

- **Phases**: one in-process ``Dispatcher.drain`` with a timer around each phase (claim,
  ``message.build``, publish with confirms, recording outcomes); milliseconds per batch.
- **CPU split**: ``relay dispatch --loop`` drains N rows committed at once (the drain clock of
  :mod:`bench.timing`); the CPU of every PostgreSQL and RabbitMQ process and of the relay
  processes, from ``/proc``, per event, read from just after the commit.
- **Metrics**: one ``relay dispatch --loop`` (batch 100) drains N rows with
  ``RELAY_METRICS_PORT`` unset and set alternately (each repetition starts with the other mode),
  scraped every second while on; rows/s and its CPU per row. Then the dispatcher's four observer
  calls for 100-event batches in a loop, no I/O, per kind of observer, each in a fresh
  interpreter; and one ``OperationsStore.gauges`` read (what a scrape costs the database)
  beside 0 and then N sent rows.

``python -m bench.costs [--events 20000] [--batch 100] [--processes 1]`` prints one CPU split.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from bench import procs, rows, services
from bench.timing import SERVERS, Workload, drain_once, median_ms, summarize
from relay.config import Settings
from relay.dispatch.dispatcher import Dispatcher
from relay.publishers import message
from relay.store.engine import create_engine
from relay.store.operations.store import OperationsStore

METRICS_BATCH = 100
#: How often the "on" runs are scraped: far more often than a Prometheus server would.
SCRAPE_EVERY_SECONDS = 1.0


def _timed(spent: dict[str, float], name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - start

    return wrapper


def _phases_of(url: str, route: services.Route, count: int, batch: int) -> dict[str, Any]:
    """Drain ``count`` rows in batches of ``batch``; milliseconds per batch, by phase."""
    engine = sa.create_engine(url)
    settings = Settings(
        database_url=url, broker_url=route.url, exchange=route.exchange_name, batch_size=batch
    )
    dispatcher = Dispatcher.from_settings(settings)
    store, publisher = dispatcher.store, dispatcher.publisher
    spent: dict[str, float] = defaultdict(float)
    build = message.build
    try:
        rows.insert_pending(engine, batch)
        dispatcher.drain(budget_seconds=60)  # connect and warm up outside the clock
        store.claim = _timed(spent, "claim", store.claim)  # type: ignore[method-assign]
        store.complete = _timed(spent, "record outcomes", store.complete)  # type: ignore[method-assign]
        # While draining, a batch's outcomes are recorded in the transaction that claims the next.
        store.complete_and_claim = _timed(  # type: ignore[method-assign]
            spent, "record outcomes + next claim", store.complete_and_claim
        )
        publisher.publish = _timed(spent, "publish + confirms", publisher.publish)  # type: ignore[method-assign]
        message.build = _timed(spent, "message.build (inside publish)", build)
        rows.insert_pending(engine, count)
        start = time.perf_counter()
        report = dispatcher.drain(budget_seconds=600)
        elapsed = time.perf_counter() - start
    finally:
        message.build = build
        publisher.close()
        store.dispose()
        engine.dispose()
        route.purge()
    cycles = max(1, report.cycles)
    per_batch = {k: v * 1000 / cycles for k, v in spent.items()}
    per_batch["cycle total"] = elapsed * 1000 / cycles
    return {
        "batch_size": batch,
        "rows": count,
        "rate": report.sent / elapsed,
        "ms_per_batch": per_batch,
    }


def phases(count: int, batches: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with (
        services.database("phases") as url,
        services.route(services.AMQP_URL, "phases") as route,
    ):
        for batch in batches:
            out[f"b{batch}"] = _phases_of(url, route, count, batch)
    return out


def cpu_split(events: int, batch: int, processes: int) -> dict[str, Any]:
    """CPU microseconds per event of PostgreSQL, RabbitMQ and the relay over one drain."""
    with services.database("cpu") as url, services.route(services.AMQP_URL, "cpu") as route:
        engine = create_engine(url)
        work = Workload(procs.relay_command(), procs.RELAY_READY, processes, batch, url, route)
        try:
            with procs.workers(work.argv, work.env(), processes, ready=work.ready) as running:
                time.sleep(0.3)  # every worker has finished its first, empty claim
                groups = {name: procs.pids_of(pattern) for name, pattern in SERVERS.items()}
                groups["relay"] = [p.pid for p in running]
                drained = drain_once(engine, events, running, cpu=groups)
        finally:
            engine.dispose()
    used = drained["cpu_us"]
    return {
        "events": events,
        "batch": batch,
        "processes": processes,
        "rows_per_s": round(drained["rate"]),
        "cpu_us_per_event": {k: round(v) for k, v in used.items()},
        "cpu_busy_of_all_cores": round(sum(used.values()) * drained["rate"] / 1e6 / _cores(), 2),
        "loadavg": services.loadavg(),
    }


def _cores() -> int:
    return os.cpu_count() or 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class _Scraper(threading.Thread):
    """Scrapes ``port`` every second until stopped; counts the scrapes that answered."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port, self.stop, self.scrapes = port, threading.Event(), 0

    def run(self) -> None:
        while not self.stop.wait(SCRAPE_EVERY_SECONDS):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5):
                    self.scrapes += 1
            except OSError:
                pass


def _metrics_drains(url: str, route: services.Route, count: int, reps: int) -> dict[str, Any]:
    """rows/s and CPU per row of one ``relay dispatch --loop``, metrics off and on."""
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    scrapes = 0
    engine = create_engine(url)
    try:
        rows.clear(engine)
        route.purge()
        for rep in range(reps):
            for mode in ("off", "on") if rep % 2 == 0 else ("on", "off"):
                port = _free_port()
                extra = {"RELAY_METRICS_PORT": str(port)} if mode == "on" else {}
                work = Workload(
                    procs.relay_command(), procs.RELAY_READY, 1, METRICS_BATCH, url, route, extra
                )
                scraper = _Scraper(port)
                if mode == "on":
                    scraper.start()
                try:
                    with procs.workers(work.argv, work.env(), 1, ready=work.ready) as running:
                        time.sleep(0.3)  # the worker has finished its first, empty claim
                        pids = {"relay": [p.pid for p in running]}
                        runs[mode].append(drain_once(engine, count, running, cpu=pids))
                finally:
                    scraper.stop.set()
                scrapes += scraper.scrapes
                if (delivered := route.purge()) != count:
                    raise RuntimeError(f"queue held {delivered} messages, expected {count}")
                rows.clear(engine)
    finally:
        engine.dispose()
    out: dict[str, Any] = {"rows": count, "scrapes": scrapes}
    for mode, found in runs.items():
        out[mode] = summarize([r["rate"] for r in found])
        out[f"{mode}_cpu_us"] = summarize([r["cpu_us"]["relay"] for r in found])
    out["ratio"] = out["on"]["median"] / out["off"]["median"]
    out["cpu_ratio"] = out["on_cpu_us"]["median"] / out["off_cpu_us"]["median"]
    return out


_HOOKS = """
import json, time
from relay.observe.observers import Observer, Recorded
from relay.records import PublishResult
from bench.rows import claimed
kind = {kind!r}
if kind == "off":
    observer = Observer()
else:
    from relay.observe.metrics import PrometheusObserver
    observer = PrometheusObserver.shared()
batch = [claimed(n) for n in range({batch})]
send = lambda events: PublishResult(confirmed=list(events))
def one():
    observer.claimed(batch, 0.001)
    result = observer.publish(batch, send)
    observer.recorded(Recorded(result.confirmed, (), (), 0, 0, True, (len(batch), 0, 0)))
for _ in range(50):
    one()
started = time.perf_counter()
for _ in range({batches}):
    one()
print(json.dumps((time.perf_counter() - started) / ({batches} * {batch}) * 1e6))
"""


def _hooks(batches: int) -> dict[str, float]:
    """Microseconds per event of the observer calls, per kind of observer."""
    out: dict[str, float] = {}
    for kind in ("off", "single-process", "multiprocess"):
        env = dict(os.environ)
        with tempfile.TemporaryDirectory(prefix="relay-bench-metrics-") as directory:
            if kind == "multiprocess":
                env["PROMETHEUS_MULTIPROC_DIR"] = directory
            else:
                env.pop("PROMETHEUS_MULTIPROC_DIR", None)
            code = _HOOKS.format(kind=kind, batch=METRICS_BATCH, batches=batches)
            reply = subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
            )
        out[kind] = round(float(reply.stdout), 3)
    return out


def _gauge_reads(url: str, history: int, reps: int) -> dict[str, Any]:
    """Milliseconds of one gauges read, median of ``reps``, with 0 and ``history`` sent rows."""
    engine = sa.create_engine(url)
    store = OperationsStore.from_url(url)
    out: dict[str, Any] = {}
    try:
        rows.clear(engine)
        rows.insert_rows(engine, 100, status="pending")
        for sent in (0, history):
            if sent:
                rows.insert_rows(engine, sent, status="sent")
                with engine.connect() as conn:
                    conn.execute(sa.text("ANALYZE outbox"))
            out[str(sent)] = round(median_ms(lambda: store.gauges(100_000), reps)["median_ms"], 2)
    finally:
        rows.clear(engine)
        store.dispose()
        engine.dispose()
    return out


def metrics(count: int, reps: int, hook_batches: int, history: int) -> dict[str, Any]:
    with (
        services.database("metrics") as url,
        services.route(services.AMQP_URL, "metrics") as route,
    ):
        drained = _metrics_drains(url, route, count, reps)
        gauges = _gauge_reads(url, history, 5)
    return {
        "batch_size": METRICS_BATCH,
        "reps": reps,
        "drain": drained,
        "hooks_us_per_event": _hooks(hook_batches),
        "gauges_ms": gauges,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.costs", description=__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps(cpu_split(args.events, args.batch, args.processes)))


if __name__ == "__main__":
    main()
