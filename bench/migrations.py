"""The ``migrations`` section (issue 48): how long the application's commits wait while
``relay migrate`` runs on a large outbox that a report holds open, online against before.

For each database (PostgreSQL with ``pg_rows`` sent rows, MariaDB with ``mariadb_rows``) and
each case (the whole chain since 0005, whose revisions build and drop the outbox's indexes;
each revision of this release alone: 0015), two runs on fresh databases of the same size:

- **before** (the baseline): ``relay migrate`` of :data:`BEFORE`, the last commit before the
  migrations went online (its package from ``git archive``), each statement waiting for its
  lock as long as it takes and indexes built in the revision's transaction;
- **online**: the checkout's ``relay migrate`` at its defaults (300 ms, retried).

In both, a producer commits one single-row ``INSERT`` every 5 ms (plain SQL), and a report
opens a transaction, reads the outbox and holds it open for ``report_seconds`` while the
migration starts. The figure is the longest commit under way while the migration ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench import services
from relay.store.engine import create_engine
from relay.store.schema import upgrade

#: (label, the revision the database is at before; the migration goes to head)
CASES = [("chain 0005 -> head", "0005"), ("0015 alone", "0014")]
#: The baseline: the chain as it was applied before issue 48 (same revisions, same schema).
BEFORE = "e9b4a33"
COMMIT_EVERY = 0.005


@contextmanager
def _package_of(commit: str) -> Iterator[str]:
    """A folder holding the ``relay`` package of ``commit`` (for ``PYTHONPATH``)."""
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="relay-before-") as folder:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", commit, "relay"],
            capture_output=True,
            check=True,
            timeout=120,
        ).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True, timeout=120)
        yield folder


@contextmanager
def _database(kind: str, revision: str) -> Iterator[str]:
    name = f"relay_bench_migrate_{uuid.uuid4().hex[:8]}"
    postgres = kind == "postgresql"
    quoted = f'"{name}"' if postgres else f"`{name}`"
    admin = sa.create_engine(services.ADMIN_URLS[kind], isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {quoted}"))
        url = sa.make_url(services.ADMIN_URLS[kind]).set(database=name)
        rendered = url.render_as_string(False)
        upgrade.upgrade(rendered, revision)
        yield rendered
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {quoted}{' WITH (FORCE)' * postgres}"))
        admin.dispose()


def _fill(engine: sa.Engine, rows: int) -> float:
    """``rows`` sent rows, fast; returns the seconds it took."""
    started = time.monotonic()
    if engine.dialect.name == "postgresql":
        source = "generate_series(1, :n) AS g"
        payload, now = "CAST('{}' AS jsonb)", "now()"
    else:
        source = "seq_1_to_{n}".replace("{n}", str(rows))
        payload, now = "'{}'", "UTC_TIMESTAMP(6)"
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO outbox (event_type, payload, status, attempt, sent_at)"
                f" SELECT 'bench.history', {payload}, 'sent', 1, {now} FROM {source}"
            ),
            {"n": rows},
        )
    return time.monotonic() - started


class _Producer(threading.Thread):
    """One single-row commit every :data:`COMMIT_EVERY`, each timed."""

    def __init__(self, engine: sa.Engine) -> None:
        super().__init__(name="producer", daemon=True)
        self.engine, self.stop = engine, threading.Event()
        self.waits: list[tuple[float, float]] = []

    def run(self) -> None:
        cast = "CAST(:p AS jsonb)" if self.engine.dialect.name == "postgresql" else ":p"
        insert = sa.text(f"INSERT INTO outbox (event_type, payload) VALUES ('bench.live', {cast})")
        while not self.stop.is_set():
            at = time.monotonic()
            with self.engine.begin() as conn:
                conn.execute(insert, {"p": "{}"})
            self.waits.append((at, time.monotonic() - at))
            time.sleep(max(0.0, at + COMMIT_EVERY - time.monotonic()))

    def worst(self, start: float, end: float) -> float:
        return max((w for at, w in self.waits if at <= end and at + w >= start), default=0.0)


def _one(kind: str, start: str, rows: int, package: str | None, report: float) -> dict[str, Any]:
    """One migration from ``start`` to head under the load; ``package``: the ``relay`` package
    to migrate with (the baseline's), None for the checkout's."""
    with _database(kind, start) as url:
        engine = create_engine(url)
        try:
            fill_seconds = _fill(engine, rows)
            producer = _Producer(engine)
            producer.start()
            time.sleep(1.0)
            command = [sys.executable, "-m", "relay", "migrate"]
            env = {**os.environ, "RELAY_DATABASE_URL": url, "RELAY_BROKER_URL": "memory://"}
            if package is not None:
                env["PYTHONPATH"] = package
            # ``-m`` puts the working folder first on the path: the package's own, or the
            # checkout's.
            cwd = package or str(Path(__file__).resolve().parent.parent)
            with engine.connect() as reader:
                reader.begin()
                reader.execute(sa.text("SELECT count(*) FROM outbox")).scalar_one()
                began = time.monotonic()
                migrating = subprocess.Popen(
                    command,
                    env=env,
                    cwd=cwd,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                time.sleep(report)
                reader.rollback()
            output, _ = migrating.communicate(timeout=1800)
            ended = time.monotonic()
            time.sleep(0.5)
            producer.stop.set()
            producer.join(30)
            if migrating.returncode != 0:
                raise RuntimeError(f"relay migrate failed:\n{output}")
            return {
                "migrate_seconds": round(ended - began, 2),
                "worst_commit_ms": round(producer.worst(began, ended) * 1000, 1),
                "commits": len(producer.waits),
                "retries": output.count("waiting for"),
                "fill_seconds": round(fill_seconds, 1),
            }
        finally:
            engine.dispose()


def run(pg_rows: int, mariadb_rows: int, report_seconds: float = 8.0) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    with _package_of(BEFORE) as before_package:
        for kind, rows in (("postgresql", pg_rows), ("mariadb", mariadb_rows)):
            for label, start in CASES:
                before = _one(kind, start, rows, before_package, report_seconds)
                online = _one(kind, start, rows, None, report_seconds)
                ratio = online["worst_commit_ms"] / max(before["worst_commit_ms"], 0.1)
                results.append(
                    {
                        "database": kind,
                        "rows": rows,
                        "case": label,
                        "before": before,
                        "online": online,
                        "worst_ratio": round(ratio, 3),
                    }
                )
                print(f"[migrations] {results[-1]}", flush=True)
    return {
        "report_seconds": report_seconds,
        "commit_every_ms": COMMIT_EVERY * 1000,
        "before": BEFORE,
        "runs": results,
    }


if __name__ == "__main__":
    import json

    pg = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    maria = int(sys.argv[2]) if len(sys.argv) > 2 else 300_000
    print(json.dumps(run(pg, maria), indent=2))
