"""What a keyed enqueue costs its writer (issue 24): the 0012 trigger against the statements
``relay.enqueue`` ran before it, in one run, sides interleaved.

Each transaction writes one event through ``engine.begin()`` (no business row, so the enqueue
is all there is to time), from 1 or 4 producer processes of one thread each:

- ``trigger``: ``relay.enqueue(conn, ..., ordering_key=K)`` as shipped: one INSERT, numbered by
  the database's trigger;
- ``explicit``: what ``relay.enqueue`` did before 0012, on the same schema: take the key's
  number (:func:`bench.numbering.next_seq`: the upsert, and on MySQL/MariaDB ``SELECT
  LAST_INSERT_ID()``; the progress row with a key's first number), then INSERT the row with its
  ``seq`` (the trigger's condition is false for it);
- ``unkeyed`` and ``unkeyed_off``: an unkeyed ``relay.enqueue`` with the numbering trigger in
  place, and with it removed (PostgreSQL: disabled; MariaDB and SQLite: dropped, re-created
  after): what the trigger costs writers that do not use keys.

Keys are drawn from 1,000, so same-key writers seldom wait for each other. Figures are medians
of the repetitions.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from bench import numbering, services
from bench.timing import ratio
from bench.writing import median, rate, writer_pool
from relay.store.engine import create_engine

MODES = ("trigger", "explicit", "unkeyed", "unkeyed_off")
KEYS = 1000
PAYLOAD = {"order_id": 12345, "total": "99.90", "lines": [{"sku": "A-1", "qty": 2}]}


def _explicit(conn: sa.Connection, key: str) -> None:
    """The pre-0012 path of ``relay.enqueue`` for a keyed event, through the same builders."""
    values: dict[str, Any] = {
        "event_type": "order.placed",
        "payload": PAYLOAD,
        "headers": None,
        "ordering_key": key,
    }
    values["seq"] = numbering.next_seq(conn, key)
    numbering.insert_numbered(conn, values)


def _enqueue(url: str, mode: str, threads: int, start_at: float, seconds: float) -> int:
    """In a producer process: ``threads`` writers commit one event per transaction."""
    from relay import enqueue

    engine = create_engine(url, pool_size=threads, max_overflow=0)
    counts = [0] * threads

    def one(i: int) -> None:
        rng = random.Random(i + int(start_at))
        with engine.connect():
            pass  # the pool's connection opened before the clock
        time.sleep(max(0.0, start_at - time.time()))
        end, n = start_at + seconds, 0
        while time.time() < end:
            key = f"customer-{rng.randrange(KEYS)}"
            with engine.begin() as conn:
                if mode == "explicit":
                    _explicit(conn, key)
                else:
                    keyed = key if mode == "trigger" else None
                    enqueue(conn, "order.placed", PAYLOAD, ordering_key=keyed)
            n += 1
        counts[i] = n

    workers = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    engine.dispose()
    return sum(counts)


class _Trigger:
    """Takes the numbering trigger away and puts it back, per database."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(url)
        self.kind = self.engine.dialect.name
        with self.engine.connect() as conn:
            if self.kind == "sqlite":
                self.ddl = conn.execute(
                    sa.text("SELECT sql FROM sqlite_master WHERE name = 'relay_outbox_seq'")
                ).scalar_one()
            elif self.kind != "postgresql":
                row = conn.execute(sa.text("SHOW CREATE TRIGGER relay_outbox_seq")).one()
                self.ddl = row[2]

    def off(self) -> None:
        with self.engine.begin() as conn:
            if self.kind == "postgresql":
                conn.execute(sa.text("ALTER TABLE outbox DISABLE TRIGGER relay_outbox_seq"))
            else:
                conn.execute(sa.text("DROP TRIGGER relay_outbox_seq"))

    def on(self) -> None:
        with self.engine.begin() as conn:
            if self.kind == "postgresql":
                conn.execute(sa.text("ALTER TABLE outbox ENABLE TRIGGER relay_outbox_seq"))
            else:
                conn.exec_driver_sql(self.ddl)


def _clear(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        for table in ("outbox", "outbox_sequence", "outbox_progress"):
            conn.execute(sa.text(f"DELETE FROM {table}"))
    engine.dispose()


def measure(kind: str, processes: Sequence[int], seconds: float, reps: int) -> dict[str, Any]:
    """Transactions/s of each mode on ``kind``, for each number of producer processes."""
    out: dict[str, Any] = {}
    with services.database("producers", kind) as url, writer_pool() as pool:
        trigger = _Trigger(url)
        for k in processes:
            runs: dict[str, list[float]] = {m: [] for m in MODES}
            for _ in range(reps):
                for mode in MODES:
                    _clear(url)
                    if mode == "unkeyed_off":
                        trigger.off()
                    try:
                        runs[mode].append(rate(pool, _enqueue, url, mode, k, seconds))
                    finally:
                        if mode == "unkeyed_off":
                            trigger.on()
            row: dict[str, Any] = {m: round(median(v)) for m, v in runs.items()}
            row["trigger_vs_explicit"] = round(ratio(row["trigger"], row["explicit"]), 2)
            row["unkeyed_vs_off"] = round(ratio(row["unkeyed"], row["unkeyed_off"]), 2)
            out[str(k)] = {"processes": k, **row}
            print(f"  producers {kind} P={k}: {row}", flush=True)
        trigger.engine.dispose()
    return out


def run(processes: Sequence[int], seconds: float, reps: int) -> dict[str, Any]:
    """The section: every database, 1 and 4 producer processes."""
    result: dict[str, Any] = {"seconds": seconds, "reps": reps, "key_count": KEYS}
    for kind in ("postgresql", "mariadb", "sqlite"):
        result[kind] = measure(kind, processes, seconds, reps)
    result["loadavg"] = services.loadavg()
    return result
