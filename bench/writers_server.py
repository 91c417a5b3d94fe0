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
- ``outbox`` as shipped (on PostgreSQL, since migration 0014, only the keyed numbering's
  trigger, whose ``WHEN`` skips unkeyed rows) and, on PostgreSQL, with its triggers disabled,
  and with the wake-up trigger of migrations 0004/0011 put back for comparison (flag off, as a
  busy relay left it, and on, when every statement called the notify function; the
  commit-time NOTIFY lock, which serialized commits, is :mod:`bench.writers`' to show, not
  this loop's).

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

#: The wake-up trigger migrations 0004 and 0011 put on ``outbox`` and 0014 dropped, as it was:
#: a statement-level NOTIFY whenever the flag sequence read 1.
_PG_WAKEUP_0011 = (
    "CREATE SEQUENCE bench_wakeup MINVALUE 0 MAXVALUE 1 START WITH 0",
    "CREATE FUNCTION bench_notify_0011() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "PERFORM pg_notify('bench_writers', ''); RETURN NULL; END $$",
    "CREATE TRIGGER bench_notify_0011 AFTER INSERT ON outbox FOR EACH STATEMENT "
    "WHEN (pg_sequence_last_value('bench_wakeup') = 1) EXECUTE FUNCTION bench_notify_0011()",
)
_PG_TRIGGERS = ("relay_outbox_seq", "bench_notify_0011")
#: PostgreSQL sides on the shipped ``outbox``: the triggers left enabled, and the 0011 flag.
_PG_OUTBOX: dict[str, tuple[tuple[str, ...], int]] = {
    "outbox, triggers disabled": ((), 0),
    "outbox as shipped": (("relay_outbox_seq",), 0),
    "before 0014: + wake-up trigger, flag off": (_PG_TRIGGERS, 0),
    "before 0014: + wake-up trigger, flag on": (_PG_TRIGGERS, 1),
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
        if kind == "postgresql":
            for ddl in _PG_WAKEUP_0011:
                conn.execute(sa.text(ddl))
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
        prepare.append(f"SELECT setval('bench_wakeup', {flag}, true)")
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
