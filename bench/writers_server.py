"""The database server's time per ``INSERT`` for each index and trigger on ``outbox`` (issue 27).

Commits/s of many writers (:mod:`bench.writers`) move by up to 2x between runs of one side on 2
shared cores, which hides a price of a few microseconds. Here the server alone is timed: a
loop *inside* the database (a PL/pgSQL function on PostgreSQL, a stored procedure on MariaDB)
inserts :data:`ROWS` single-row ``INSERT`` statements in one transaction, with no client round
trip, parse or commit per row, so each statement's own cost is what is left: the row, the
indexes it enters, the triggers that fire or are skipped. Tables of one database:

- ``plain``: the outbox's columns and primary key; ``+ <index>``: ``plain`` plus one index a
  pending unkeyed row enters (:data:`bench.writers_indexes.ENTERED`);
- ``indexed``: a copy of ``outbox`` with every index and no trigger;
- ``outbox`` as shipped (flag off, as a busy or absent relay leaves it) and, on PostgreSQL, with
  one trigger at a time (``ALTER TABLE ... DISABLE TRIGGER``) and with the wake-up flag on
  (every statement then calls the notify function; the commit-time NOTIFY lock, which
  serializes commits, is :mod:`bench.writers`' to show, not this loop's).

Sides take turns, reversed every other repetition; medians of the repetitions, microseconds a
row.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from bench import services
from bench.writers_indexes import _tables as index_tables
from bench.writing import PAYLOAD, median
from relay.store.engine import create_engine

#: Statements a run inserts, in one transaction.
ROWS = 20_000

_PG_TRIGGERS = ("relay_outbox_notify", "relay_outbox_seq")
#: PostgreSQL sides on the shipped ``outbox``: the triggers left enabled, and the wake-up flag.
_PG_OUTBOX: dict[str, tuple[tuple[str, ...], int]] = {
    "outbox, triggers disabled": ((), 0),
    "outbox, numbering trigger only": (("relay_outbox_seq",), 0),
    "outbox, wake-up trigger only (flag off)": (("relay_outbox_notify",), 0),
    "outbox as shipped (flag off)": (_PG_TRIGGERS, 0),
    "outbox as shipped, flag on": (_PG_TRIGGERS, 1),
}


def _pg_loop(table: str) -> str:
    return (
        f"CREATE FUNCTION bench_loop_{table}(n int) RETURNS void LANGUAGE plpgsql AS $$ "
        f"BEGIN FOR i IN 1..n LOOP INSERT INTO {table} (event_type, payload) "
        f"VALUES ('order.placed', '{PAYLOAD}'); END LOOP; END $$"
    )


def _maria_loop(table: str) -> str:
    return (
        f"CREATE PROCEDURE bench_loop_{table}(n INT) BEGIN DECLARE i INT DEFAULT 0; "
        f"WHILE i < n DO INSERT INTO {table} (event_type, payload) "
        f"VALUES ('order.placed', '{PAYLOAD}'); SET i = i + 1; END WHILE; END"
    )


def _setup(url: str, kind: str) -> dict[str, tuple[str, Sequence[str]]]:
    """Every side's table and the statements that prepare it; the loops created."""
    tables = index_tables(url, kind)
    engine = create_engine(url)
    with engine.begin() as conn:
        like = "(LIKE outbox INCLUDING ALL)" if kind == "postgresql" else "LIKE outbox"
        conn.execute(sa.text(f"CREATE TABLE bench_indexed {like}"))
        for table in [*tables, "bench_indexed", "outbox"]:
            loop = _pg_loop if kind == "postgresql" else _maria_loop
            conn.execute(sa.text(loop(table)))
    engine.dispose()
    sides: dict[str, tuple[str, Sequence[str]]] = {"plain": ("bench_plain", ())}
    for table in tables[1:]:
        sides[f"+ {table.removeprefix('bench_with_')}"] = (table, ())
    sides["indexed (no trigger)"] = ("bench_indexed", ())
    if kind != "postgresql":
        sides["outbox as shipped"] = ("outbox", ())
        return sides
    for name, (enabled, flag) in _PG_OUTBOX.items():
        prepare = [
            f"ALTER TABLE outbox {'ENABLE' if t in enabled else 'DISABLE'} TRIGGER {t}"
            for t in _PG_TRIGGERS
        ]
        prepare.append(f"SELECT setval('relay_wakeup', {flag}, true)")
        sides[name] = ("outbox", prepare)
    return sides


def _run(engine: sa.Engine, kind: str, table: str, prepare: Sequence[str]) -> float:
    """Microseconds a row of one loop of :data:`ROWS` inserts into ``table``."""
    with engine.begin() as conn:
        conn.execute(sa.text(f"TRUNCATE TABLE {table}"))
        for statement in prepare:
            conn.execute(sa.text(statement))
    verb = "SELECT" if kind == "postgresql" else "CALL"
    call = f"{verb} bench_loop_{table}(:n)"
    with engine.begin() as conn:
        started = time.perf_counter()
        conn.execute(sa.text(call), {"n": ROWS})
        took = time.perf_counter() - started
        conn.rollback()
    return took / ROWS * 1e6


def measure(kind: str, reps: int) -> dict[str, Any]:
    """Microseconds a row per side on ``kind``, with each side's difference from ``plain``."""
    with services.database("writers_server", kind) as url:
        sides = _setup(url, kind)
        engine = create_engine(url)
        runs: dict[str, list[float]] = {s: [] for s in sides}
        try:
            for rep in range(reps):
                for side in sides if rep % 2 == 0 else list(sides)[::-1]:
                    runs[side].append(_run(engine, kind, *sides[side]))
        finally:
            engine.dispose()
    plain = median(runs["plain"])
    out: dict[str, Any] = {"rows": ROWS, "reps": reps, "sides": {}}
    for side, values in runs.items():
        us = median(values)
        out["sides"][side] = {
            "us": round(us, 2),
            "over_plain_us": round(us - plain, 2),
            "runs": [round(v, 2) for v in values],
        }
    print(f"  writers server {kind}: { {s: v['us'] for s, v in out['sides'].items()} }", flush=True)
    return out
