"""History scaling: the drain rate of 10,000 pending rows as the table's sent history grows.

The sent history is generated in SQL (``INSERT … SELECT generate_series``) in one dedicated
database, growing from the smallest size to the largest; after each drain the drained rows are
deleted again, so every run starts from exactly ``size`` sent rows and ``pending`` new ones.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa

from bench import fixtures, procs, rows
from bench.drain import Workload, measure
from relay.dialects.postgresql import PostgresDialect

INDEX = "ix_outbox_claimable"


def _vacuum(engine: sa.Engine) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE outbox"))


def _max_id(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT coalesce(max(id), 0) FROM outbox")).scalar_one())


def explain_claim(engine: sa.Engine, batch_size: int) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of the relay's claim statement, rolled back afterwards."""
    stmt = PostgresDialect().claim_statement(worker="bench", limit=batch_size, lease_seconds=30)
    sql = str(stmt.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        trans = conn.begin()
        try:
            plan = [r[0] for r in conn.execute(sa.text(f"EXPLAIN (ANALYZE, BUFFERS) {sql}"))]
        finally:
            trans.rollback()
    return {"uses_claimable_index": any(INDEX in line for line in plan), "plan": plan}


def run(
    amqp_url: str, sizes: list[int], pending: int, reps: int, batch_size: int = 100
) -> dict[str, Any]:
    """For each history size: relay drain rate, SQL-only drain rate, and the claim's plan."""
    out: dict[str, Any] = {"pending": pending, "batch_size": batch_size, "sizes": {}}
    with fixtures.database("history") as url, fixtures.route(amqp_url, "history") as route:
        engine = sa.create_engine(url)
        try:
            current = 0
            for size in sorted(sizes):
                started = time.perf_counter()
                rows.insert_rows(engine, size - current, status="sent")
                current = size
                _vacuum(engine)
                generated = time.perf_counter() - started
                floor = _max_id(engine)

                def reset(eng: sa.Engine, floor: int = floor) -> None:
                    with eng.begin() as conn:
                        conn.execute(sa.text("DELETE FROM outbox WHERE id > :f"), {"f": floor})
                    _vacuum(eng)

                rows.insert_pending(engine, pending)
                plan = explain_claim(engine, batch_size)
                reset(engine)
                result: dict[str, Any] = {"sent_rows": size, "generate_seconds": generated}
                for label, argv, ready, check in (
                    ("relay", procs.relay_command(), procs.RELAY_READY, True),
                    ("sql_only", procs.module_command("bench.sqlonly"), procs.BENCH_READY, False),
                ):
                    work = Workload(argv, ready, 1, batch_size, url, route)
                    result[label] = measure(work, pending, reps, check_queue=check, reset=reset)
                result["explain"] = plan
                out["sizes"][str(size)] = result
        finally:
            engine.dispose()
    return out
