"""What Prometheus metrics cost the relay: ``relay dispatch --loop`` with ``RELAY_METRICS_PORT``
set against unset, in the same run, plus the observer's own CPU per event and the price of the
outbox gauges' read as the table's history grows.

- drain: one ``relay dispatch --loop`` (batch 100) drains N rows committed at once, metrics off
  and on alternately (each repetition starts with the other mode), scraped every second while
  on; rows/s from the commit until nothing is unfinished (:mod:`bench.drain`).
- hooks: the dispatcher's four observer calls for 100-event batches in a loop, no I/O, with the
  no-op observer, the Prometheus observer, and the Prometheus observer in multiprocess mode (a
  prefork Celery worker's children), each in a fresh interpreter; microseconds per event.
- gauges: one :meth:`relay.store.Store.gauges` read (what a scrape costs the database) with
  100 pending rows beside 0 and then N sent rows.

Alone: ``python -m bench --only metrics_cost`` or ``python -m bench.metrics_cost [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any

import sqlalchemy as sa

from bench import drain, fixtures, procs, rows, services
from bench.stats import summarize
from bench.wakeup import cpu_seconds

BATCH = 100
#: How often the "on" runs are scraped: far more often than a Prometheus server would.
SCRAPE_EVERY_SECONDS = 1.0


def _free_port() -> int:
    import socket

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


def _one_drain(
    url: str, engine: sa.Engine, route: fixtures.Route, count: int, extra: dict[str, str]
) -> dict[str, float]:
    """One process, ``count`` rows committed at once: rows/s and its CPU microseconds per row."""
    work = drain.Workload(
        procs.relay_command(), procs.RELAY_READY, 1, BATCH, url, route, extra_env=extra
    )
    with procs.workers(work.argv, work.env(), 1, ready=work.ready) as running:
        time.sleep(0.3)  # as bench.drain: let the worker finish its first (empty) claim
        pids = [p.pid for p in running]
        cpu = cpu_seconds(pids)
        rows.insert_pending(engine, count)
        committed = time.perf_counter()
        deadline = committed + 600
        while rows.unfinished(engine):
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{count} rows not drained within 600s")
            procs.check_alive(running)
            time.sleep(0.02)
        elapsed = time.perf_counter() - committed
        cpu = cpu_seconds(pids) - cpu
    delivered = route.depth()
    if delivered != count:
        raise RuntimeError(f"queue held {delivered} messages, expected {count}")
    route.purge()
    drain.truncate(engine)
    return {"rate": count / elapsed, "cpu_us": cpu / count * 1e6}


def drain_rates(url: str, route: fixtures.Route, count: int, reps: int) -> dict[str, Any]:
    """rows/s and CPU per row of one ``relay dispatch --loop``, metrics off and on, alternating
    which goes first."""
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    scrapes = 0
    engine = sa.create_engine(url)
    try:
        drain.truncate(engine)
        route.purge()
        for rep in range(reps):
            for mode in ("off", "on") if rep % 2 == 0 else ("on", "off"):
                port = _free_port()
                extra = {"RELAY_METRICS_PORT": str(port)} if mode == "on" else {}
                scraper = _Scraper(port)
                if mode == "on":
                    scraper.start()
                try:
                    runs[mode].append(_one_drain(url, engine, route, count, extra))
                finally:
                    scraper.stop.set()
                scrapes += scraper.scrapes
    finally:
        engine.dispose()
    out: dict[str, Any] = {"rows": count, "scrapes": scrapes}
    for mode, found in runs.items():
        out[mode] = summarize([r["rate"] for r in found])
        out[f"{mode}_cpu_us"] = summarize([r["cpu_us"] for r in found])
    out["ratio"] = out["on"]["median"] / out["off"]["median"]
    out["cpu_ratio"] = out["on_cpu_us"]["median"] / out["off_cpu_us"]["median"]
    return out


_HOOKS = """
import json, time
from relay.observe import Observer, Recorded
from relay.records import PublishResult
from bench.rows import claimed
kind = {kind!r}
if kind == "off":
    observer = Observer()
else:
    from relay.metrics import PrometheusObserver
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


def hooks(batches: int) -> dict[str, float]:
    """Microseconds per event of the observer calls, per kind of observer."""
    out: dict[str, float] = {}
    for kind in ("off", "single-process", "multiprocess"):
        env = dict(os.environ)
        with tempfile.TemporaryDirectory(prefix="relay-bench-metrics-") as directory:
            if kind == "multiprocess":
                env["PROMETHEUS_MULTIPROC_DIR"] = directory
            else:
                env.pop("PROMETHEUS_MULTIPROC_DIR", None)
            code = _HOOKS.format(kind=kind, batch=BATCH, batches=batches)
            reply = subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
            )
        out[kind] = round(float(reply.stdout), 3)
    return out


def gauge_reads(url: str, history: int, reps: int) -> dict[str, Any]:
    """Milliseconds of one gauges read, median of ``reps``, with 0 and ``history`` sent rows."""
    from relay.store import Store

    engine = sa.create_engine(url)
    store = Store.from_url(url)
    out: dict[str, Any] = {}
    try:
        drain.truncate(engine)
        rows.insert_rows(engine, 100, status="pending")
        for sent in (0, history):
            if sent:
                rows.insert_rows(engine, sent, status="sent")
                with engine.connect() as conn:
                    conn.execute(sa.text("ANALYZE outbox"))
            store.gauges(100_000)  # warm
            times = []
            for _ in range(reps):
                started = time.perf_counter()
                store.gauges(100_000)
                times.append((time.perf_counter() - started) * 1000)
            out[str(sent)] = round(sorted(times)[len(times) // 2], 2)
    finally:
        drain.truncate(engine)
        store.dispose()
        engine.dispose()
    return out


def run(plan: Any) -> dict[str, Any]:
    quick = getattr(plan, "name", "") == "quick"
    count, reps = (5_000, 2) if quick else (20_000, 5)
    history = 100_000 if quick else 1_000_000
    with fixtures.database("metrics") as url, fixtures.route(services.AMQP_URL, "metrics") as r:
        drained = drain_rates(url, r, count, reps)
        gauges = gauge_reads(url, history, 5)
    return {
        "batch_size": BATCH,
        "reps": reps,
        "drain": drained,
        "hooks_us_per_event": hooks(200 if quick else 2000),
        "gauges_ms": gauges,
    }


def render(data: dict[str, Any]) -> str:
    """The report's section on the cost of metrics (Markdown)."""
    d, h, g = data["drain"], data["hooks_us_per_event"], data["gauges_ms"]
    off, on = d["off"], d["on"]
    history = max(g, key=int)
    return "\n".join(
        [
            "## What metrics cost (`bench/metrics_cost.py`)",
            "",
            f"One `relay dispatch --loop` (batch {data['batch_size']}) drains {d['rows']:,} rows"
            " committed at once, `RELAY_METRICS_PORT` unset and set alternately in the same run"
            f" ({data['reps']} each), the endpoint scraped every {SCRAPE_EVERY_SECONDS:g} s while"
            f" on ({d['scrapes']} scrapes); rows/s, median (min-max).",
            "",
            "| metrics | rows/s | vs off | relay CPU per row | vs off |",
            "| --- | --- | --- | --- | --- |",
            f"| off | {off['median']:,.0f} ({off['min']:,.0f}-{off['max']:,.0f}) | 1.00x"
            f" | {d['off_cpu_us']['median']:.0f} µs | 1.00x |",
            f"| on | {on['median']:,.0f} ({on['min']:,.0f}-{on['max']:,.0f}) |"
            f" {d['ratio']:.2f}x | {d['on_cpu_us']['median']:.0f} µs | {d['cpu_ratio']:.2f}x |",
            "",
            "The machine's 2 cores are shared with the database and the broker (and, in this run,"
            " with other work): the rate moves with their load, the relay process's CPU per row"
            " (user + system, all its threads) much less.",
            "",
            f"The observer's own CPU, per event, in batches of {data['batch_size']} (no I/O):"
            f" no-op {h['off']:g} µs, Prometheus {h['single-process']:g} µs, Prometheus in"
            f" multiprocess mode (prefork Celery children) {h['multiprocess']:g} µs.",
            "",
            f"One read of the outbox gauges (one statement; counts capped at 100,000) with 100"
            f" pending rows: {g['0']:g} ms beside no sent rows, {g[history]:g} ms beside"
            f" {int(history):,} sent rows. A collector reads at most every 5 s whatever the"
            " number of scrapers. Run: `python -m bench --only metrics_cost`.",
            "",
        ]
    )


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.metrics_cost", description=__doc__)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    plan = argparse.Namespace(name="quick" if args.quick else "full")
    data = run(plan)
    print(json.dumps(data, indent=2))
    print(render(data))


if __name__ == "__main__":
    main()
