"""Claim + mark-sent rate per database: ``Store.claim`` then ``Store.mark_sent`` until empty.

For each database (PostgreSQL, MariaDB/MySQL, SQLite) and process count, a fresh migrated
database gets ``--rows`` pending rows; the processes start together and drain it in batches of
``--batch``; the rate is rows / wall time from the start signal to the last process done. Two
commits per batch, exactly the relay's database work, no broker. The median of ``--repeat``
runs is reported.

    python bench/claim_rates.py [--rows 20000] [--batch 100] [--processes 1 4] [--repeat 3]

Writes ``bench/results/claim_rates.json`` and prints a table. Server URLs come from
``BENCH_POSTGRES_URL`` and ``BENCH_MYSQL_URL`` (admin URLs; a database is created per run).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

if __package__ in (None, ""):  # run as a script: make `relay` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from relay import migrate
from relay.engine import create_engine
from relay.schema import outbox
from relay.store import Store

RESULTS = Path(__file__).resolve().parent / "results" / "claim_rates.json"
SERVERS = {
    "postgresql": os.environ.get(
        "BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    ),
    "mariadb": os.environ.get("BENCH_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test"),
}
DATABASES = ("postgresql", "mariadb", "sqlite")
LEASE_SECONDS = 300.0


@contextmanager
def fresh_database(kind: str) -> Iterator[str]:
    """A new, migrated, empty outbox database of ``kind``; dropped afterwards."""
    if kind == "sqlite":
        root = tempfile.mkdtemp(prefix="relay-bench-")
        try:
            url = f"sqlite:///{root}/bench.sqlite3"
            migrate.upgrade(url)
            yield url
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return
    admin_url = SERVERS[kind]
    name = f"relay_bench_{uuid.uuid4().hex[:10]}"
    quote = '"' if kind == "postgresql" else "`"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {quote}{name}{quote}"))
        url = sa.make_url(admin_url).set(database=name).render_as_string(False)
        try:
            migrate.upgrade(url)
            yield url
        finally:
            force = " WITH (FORCE)" if kind == "postgresql" else ""
            with admin.connect() as conn:
                conn.execute(sa.text(f"DROP DATABASE IF EXISTS {quote}{name}{quote}{force}"))
    finally:
        admin.dispose()


def fill(url: str, rows: int) -> None:
    """Insert ``rows`` pending events (~200-byte payloads) in a few transactions."""
    engine = create_engine(url)
    payload = {"order": 0, "note": "x" * 160}
    try:
        for start in range(0, rows, 5000):
            chunk = [
                {"event_type": "bench.claim", "payload": {**payload, "order": i}}
                for i in range(start, min(rows, start + 5000))
            ]
            with engine.begin() as conn:
                conn.execute(sa.insert(outbox), chunk)
    finally:
        engine.dispose()


def _claimer(url: str, batch: int, ready: Any, go: Any, out: Any) -> None:
    store = Store(create_engine(url))
    worker = f"bench:{os.getpid()}"
    store.status()  # connect before the clock starts
    ready.put(os.getpid())
    go.wait()
    moved = 0
    while events := store.claim(worker, batch, LEASE_SECONDS):
        moved += store.mark_sent(worker, events)
    store.dispose()
    out.put(moved)


def one_run(kind: str, processes: int, rows: int, batch: int) -> float:
    """Seconds for ``processes`` claimers to drain ``rows`` rows on a fresh database."""
    ctx = mp.get_context("spawn")
    with fresh_database(kind) as url:
        fill(url, rows)
        ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        procs = [
            ctx.Process(target=_claimer, args=(url, batch, ready, go, out))
            for _ in range(processes)
        ]
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=120)
        started = time.perf_counter()
        go.set()
        moved = sum(out.get(timeout=600) for _ in procs)
        elapsed = time.perf_counter() - started
        for p in procs:
            p.join(timeout=60)
        if moved != rows:
            raise RuntimeError(f"{kind}: {moved} rows marked sent, expected {rows}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--databases", nargs="+", choices=DATABASES, default=list(DATABASES))
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    load_before = os.getloadavg()
    results = []
    for kind in args.databases:
        for processes in args.processes:
            runs = [one_run(kind, processes, args.rows, args.batch) for _ in range(args.repeat)]
            rates = [args.rows / s for s in runs]
            results.append(
                {
                    "database": kind,
                    "processes": processes,
                    "batch": args.batch,
                    "rows": args.rows,
                    "rows_per_second_median": round(statistics.median(rates)),
                    "rows_per_second_runs": [round(r) for r in rates],
                }
            )
            print(f"  {kind:<11} {processes} proc: {statistics.median(rates):>9,.0f} rows/s")
    report = {
        "benchmark": "claim_rates",
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        },
        "servers": _versions(args.databases),
        "results": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(_table(report))
    print(f"written to {args.output}")
    return 0


def _versions(kinds: list[str]) -> dict[str, str]:
    versions: dict[str, str] = {}
    for kind in kinds:
        if kind == "sqlite":
            import sqlite3

            versions[kind] = sqlite3.sqlite_version
            continue
        engine = sa.create_engine(SERVERS[kind])
        with engine.connect() as conn:
            versions[kind] = str(conn.execute(sa.text("SELECT version()")).scalar())
        engine.dispose()
    return versions


def _table(report: dict[str, Any]) -> str:
    procs = sorted({r["processes"] for r in report["results"]})
    header = f"{'database':<12}" + "".join(f"{f'{p} proc rows/s':>16}" for p in procs)
    lines = [f"claim + mark_sent, batch {report['results'][0]['batch']}", header]
    for kind in dict.fromkeys(r["database"] for r in report["results"]):
        cells = {r["processes"]: r for r in report["results"] if r["database"] == kind}
        lines.append(
            f"{kind:<12}"
            + "".join(f"{cells[p]['rows_per_second_median']:>16,}" for p in procs if p in cells)
        )
    m = report["machine"]
    lines.append(f"load average before {m['loadavg_before']}, after {m['loadavg_after']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
