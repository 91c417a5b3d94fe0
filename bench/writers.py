"""What the outbox costs the application's writers (issue 27), one run, sides interleaved.

- **Single-row transactions**, no relay: K writers (threads spread over up to
  :data:`PROCESSES` processes) each commit one plain-SQL ``INSERT (event_type, payload)`` per
  transaction for a fixed time, into tables of the same database that differ only in what a
  writer pays for: ``plain`` (the outbox's columns and primary key, nothing else), ``indexed``
  (a copy of ``outbox`` with every index and no trigger), ``outbox`` (the relay's schema as
  shipped: since migration 0014 no wake-up trigger, only the keyed numbering's, which unkeyed
  rows skip) and, on PostgreSQL, ``notify`` (the copy with migration 0004's trigger, which
  NOTIFYed on every commit, for comparison).
- **Each index alone** (the outbox's columns and primary key plus one index), no relay:
  :mod:`bench.writers_indexes`.
- **The server's time per INSERT** for each index and trigger, timed inside the database
  without clients or commits: :mod:`bench.writers_server`.
- **The same with relays running** (idle, then draining a backlog): :mod:`bench.writers_relayed`,
  where both sides are relayed outboxes so that the relays' CPU falls on both alike.
- **Business transactions**, no relay: one ``INSERT`` into an orders table per transaction
  through SQLAlchemy, alone or with a ``relay.enqueue`` of one event (unkeyed, or keyed by one
  of 1,000 customers) in the same transaction.

Sides take turns within each repetition, their order reversed every other repetition, and each
figure is the median of the repetitions, so a load change on the shared machine hits every side
alike.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from bench import services, writers_indexes, writers_relayed, writers_server
from bench.timing import ratio
from bench.writing import median, rate, write, writer_pool
from relay.store.engine import create_engine
from relay.store.schema.tables import outbox

#: Migration 0004's trigger, on its own channel so that it wakes nobody.
NOTIFY_ALWAYS = (
    "CREATE FUNCTION bench_notify() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "PERFORM pg_notify('bench_writers', ''); RETURN NULL; END $$",
    "CREATE TRIGGER bench_notify AFTER INSERT ON bench_notify "
    "FOR EACH STATEMENT EXECUTE FUNCTION bench_notify()",
)


def _sides(kind: str) -> list[str]:
    return (
        ["plain", "indexed", "outbox", "notify"]
        if kind == "postgresql"
        else ["plain", "indexed", "outbox"]
    )


def _tables(url: str, kind: str) -> None:
    """The comparison tables beside the relay's ``outbox``."""
    engine = create_engine(url)
    plain = sa.Table("bench_plain", sa.MetaData(), *(c._copy() for c in outbox.columns))
    with engine.begin() as conn:
        plain.create(conn)
        conn.execute(sa.text("CREATE TABLE bench_orders (id BIGINT, customer VARCHAR(64))"))
        if kind == "postgresql":
            for name in ("bench_indexed", "bench_notify"):
                conn.execute(sa.text(f"CREATE TABLE {name} (LIKE outbox INCLUDING ALL)"))
            for ddl in NOTIFY_ALWAYS:
                conn.execute(sa.text(ddl))
        else:
            conn.execute(sa.text("CREATE TABLE bench_indexed LIKE outbox"))
    engine.dispose()


def _table(side: str) -> str:
    return "outbox" if side == "outbox" else f"bench_{side}"


def _business(url: str, mode: str, threads: int, start_at: float, seconds: float) -> int:
    """In a writer process: business transactions (an order row, with ``mode``'s event)."""
    from relay import enqueue

    engine = create_engine(url, pool_size=threads, max_overflow=0)
    orders = sa.text("INSERT INTO bench_orders (id, customer) VALUES (:id, :customer)")
    counts = [0] * threads

    def one(i: int) -> None:
        rng = random.Random(i)
        time.sleep(max(0.0, start_at - time.time()))
        end, n = start_at + seconds, 0
        while time.time() < end:
            customer = f"customer-{rng.randrange(1000)}"
            with engine.begin() as conn:
                conn.execute(orders, {"id": n, "customer": customer})
                if mode != "alone":
                    key = customer if mode == "keyed" else None
                    enqueue(conn, "order.placed", {"order": n}, ordering_key=key)
            n += 1
        counts[i] = n

    workers = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    engine.dispose()
    return sum(counts)


def _clear(url: str, kind: str) -> None:
    """Empty every table, so each run starts on the same empty indexes."""
    engine = create_engine(url)
    with engine.begin() as conn:
        for side in _sides(kind):
            conn.execute(sa.text(f"TRUNCATE TABLE {_table(side)}"))
    engine.dispose()


def single_rows(kind: str, writers: Sequence[int], seconds: float, reps: int) -> dict[str, Any]:
    """Commits/s per side and K on ``kind``, no relay; ratios over ``plain`` and ``indexed``."""
    out: dict[str, Any] = {}
    sides = _sides(kind)
    with services.database("writers", kind) as url, writer_pool() as pool:
        _tables(url, kind)
        for k in writers:
            runs: dict[str, list[float]] = {s: [] for s in sides}
            for rep in range(reps):
                for side in sides if rep % 2 == 0 else sides[::-1]:
                    _clear(url, kind)
                    runs[side].append(rate(pool, write, url, _table(side), k, seconds))
            row: dict[str, Any] = {s: round(median(v)) for s, v in runs.items()}
            row["runs"] = {s: [round(x) for x in v] for s, v in runs.items()}
            row["ratio"] = ratio(row["outbox"], row["plain"])
            row["trigger_ratio"] = ratio(row["outbox"], row["indexed"])
            out[f"none/{k}"] = {"mode": "none", "writers": k, **row}
            print(f"  writers {kind} none K={k}: {row}", flush=True)
    return out


def business(kind: str, writers: Sequence[int], seconds: float, reps: int) -> dict[str, Any]:
    """Business transactions/s alone and with an unkeyed or keyed ``relay.enqueue``, no relay."""
    out: dict[str, Any] = {}
    modes = ["alone", "unkeyed", "keyed"]
    with services.database("business", kind) as url, writer_pool() as pool:
        _tables(url, kind)
        for k in writers:
            runs: dict[str, list[float]] = {m: [] for m in modes}
            for rep in range(reps):
                for m in modes if rep % 2 == 0 else modes[::-1]:
                    runs[m].append(rate(pool, _business, url, m, k, seconds))
            row: dict[str, Any] = {m: round(median(v)) for m, v in runs.items()}
            row["runs"] = {m: [round(x) for x in v] for m, v in runs.items()}
            row["unkeyed_ratio"] = ratio(row["unkeyed"], row["alone"])
            row["keyed_ratio"] = ratio(row["keyed"], row["alone"])
            out[str(k)] = {"writers": k, **row}
            print(f"  business {kind} K={k}: {row}", flush=True)
    return out


def run(
    writers: Sequence[int],
    business_writers: Sequence[int],
    seconds: float,
    reps: int,
    index_writers: Sequence[int] = (1, 32),
    relayed: tuple[float, int] | None = None,
) -> dict[str, Any]:
    """The section: single-row writers with no relay and beside relays (``relayed``: its own
    seconds and repetitions), and business transactions, on PostgreSQL and MariaDB."""
    relayed_seconds, relayed_reps = relayed or (seconds, reps)
    result: dict[str, Any] = {
        "seconds": seconds,
        "reps": reps,
        "relayed_seconds": relayed_seconds,
        "relayed_reps": relayed_reps,
        "backlog": writers_relayed.LOW,
    }
    for kind in ("postgresql", "mariadb"):
        result[kind] = {
            "server": writers_server.measure(kind, max(reps, 5)),
            "single": single_rows(kind, writers, seconds, reps),
            "indexes": writers_indexes.measure(kind, index_writers, seconds, reps),
            "relayed": writers_relayed.measure(kind, writers, relayed_seconds, relayed_reps),
            "business": business(kind, business_writers, seconds, reps),
        }
    result["loadavg"] = services.loadavg()
    return result
