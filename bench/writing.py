"""The writers of :mod:`bench.writers` and its parts: processes started (their imports done)
before any clock, each running threads that commit single-row ``INSERT`` statements from a
common start time, on connections of the drivers themselves (no SQLAlchemy on the clock).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import sqlalchemy as sa

from relay.store.engine import create_engine

#: Writer processes at most; a run's threads are spread over them (the GIL would cap one).
PROCESSES = 4
PAYLOAD = json.dumps({"order_id": 12345, "total": "99.90", "lines": [{"sku": "A-1", "qty": 2}]})


def _connect(url: str) -> Any:
    u = sa.make_url(url)
    if u.get_backend_name() == "postgresql":
        import psycopg

        return psycopg.connect(
            u.set(drivername="postgresql").render_as_string(False), autocommit=True
        )
    import pymysql  # type: ignore[import-untyped]  # no stubs installed; only connect() is used

    return pymysql.connect(
        host=u.host,
        port=u.port or 3306,
        user=u.username,
        password=u.password or "",
        database=u.database,
        autocommit=True,
    )


def write(url: str, table: str, threads: int, start_at: float, seconds: float) -> int:
    """In a writer process: ``threads`` connections commit single-row INSERTs from ``start_at``
    for ``seconds``; returns the commits."""
    sql = f"INSERT INTO {table} (event_type, payload) VALUES (%s, %s)"
    counts = [0] * threads

    def one(i: int) -> None:
        conn = _connect(url)
        cur = conn.cursor()
        if time.time() > start_at:  # connected after the clock started: the run is void
            counts[i] = -1
            return
        time.sleep(start_at - time.time())
        end = start_at + seconds
        n = 0
        while time.time() < end:
            cur.execute(sql, ("order.placed", PAYLOAD))
            n += 1
        counts[i] = n
        conn.close()

    workers = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(counts)


def rate(pool: ProcessPoolExecutor, fn: Any, url: str, what: str, k: int, seconds: float) -> float:
    """Commits/s of ``k`` writers running ``fn`` over up to :data:`PROCESSES` processes."""
    split = [k // PROCESSES + (i < k % PROCESSES) for i in range(min(k, PROCESSES))]
    start_at = time.time() + 2.0 + k * 0.03  # every connection open before the clock
    futures = [pool.submit(fn, url, what, n, start_at, seconds) for n in split]
    counts = [f.result() for f in futures]
    if any(c < 0 for c in counts):
        raise RuntimeError("a writer started late: raise the margin before the clock")
    return float(sum(counts)) / seconds


def backlog(url: str, kind: str, rows: int) -> None:
    """Fill ``outbox`` with ``rows`` pending rows in one statement."""
    series = f"generate_series(1, {rows})" if kind == "postgresql" else f"seq_1_to_{rows}"
    sql = f"INSERT INTO outbox (event_type, payload) SELECT 'bench.backlog', '{PAYLOAD}' FROM "
    sql += f"{series} AS s" if kind == "postgresql" else series
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(sql))
    engine.dispose()


def median(values: Sequence[float]) -> float:
    return sorted(values)[len(values) // 2]


def _ready() -> None:
    """In a writer process: this module and the drivers imported, before any clock."""
    import importlib

    for driver in ("psycopg", "pymysql"):  # a first connect must not import them on the clock
        importlib.import_module(driver)

    time.sleep(0.5)  # every process takes one


@contextlib.contextmanager
def writer_pool() -> Iterator[ProcessPoolExecutor]:
    """The writer processes, started (and their imports done) before any clock."""
    with ProcessPoolExecutor(PROCESSES, multiprocessing.get_context("spawn")) as pool:
        for f in [pool.submit(_ready) for _ in range(PROCESSES)]:
            f.result()
        yield pool
