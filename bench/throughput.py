"""How fast the relay drains a backlog: ``relay dispatch --loop`` per broker, process count and
batch size; the Celery fleet (``celery -A relay worker`` + beat); and the rate as the table's
sent history grows. Every rate comes from the drain clock (:mod:`bench.timing`), the same one
that times the database ceiling and the naive relay (:mod:`bench.baselines`).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import sqlalchemy as sa

from bench import procs, rows, services
from bench.timing import Workload, drain_once, grid, measure, relay_env
from relay.store.dialects.postgresql import PostgresDialect
from relay.store.engine import create_engine

#: The Celery fleet's settings: batch size and tick (beat's safety net beside its watcher).
FLEET_BATCH = 100
FLEET_TICK_SECONDS = 0.5
#: The index the unordered claim reads its pending rows from (migration 0009; before it,
#: ``ix_outbox_claimable``).
CLAIM_INDEX = "ix_outbox_pending"


def relay_grid(
    broker_url: str, count: int, reps: int, processes: list[int], batches: list[int]
) -> dict[str, Any]:
    """``relay dispatch --loop`` on PostgreSQL in each process count at each batch size,
    publishing to ``broker_url``; rows/s."""
    with services.database("relay") as url, services.route(broker_url, "relay") as route:
        return grid(
            procs.relay_command(), procs.RELAY_READY, url, route, count, reps, processes, batches
        )


def fleet(events: int, workers: list[int]) -> dict[str, Any]:
    """Events/s of beat + N solo-pool Celery workers draining ``events`` committed rows, for
    each N in ``workers``; each fleet on a fresh database and exchange. The queue's depth at the
    end proves each event was delivered exactly once."""
    runs = []
    for n in workers:
        with (
            services.database("fleet") as url,
            services.route(services.AMQP_URL, "fleet") as route,
        ):
            extra = {
                "RELAY_QUEUE": f"bench.relay.{uuid.uuid4().hex[:8]}",
                "RELAY_TICK_SECONDS": str(FLEET_TICK_SECONDS),
                "RELAY_MAX_FANOUT": str(max(2, n)),
            }
            engine = create_engine(url)
            try:
                with procs.celery_fleet(relay_env(url, route, FLEET_BATCH, extra), n) as running:
                    rate = drain_once(engine, events, running)["rate"]
            finally:
                engine.dispose()
            seconds = events / rate
            runs.append(
                {
                    "workers": n,
                    "events": events,
                    "seconds": round(seconds, 3),
                    "events_per_s": round(rate),
                    "delivered": route.depth(),
                }
            )
    return {
        "events": events,
        "batch_size": FLEET_BATCH,
        "tick_seconds": FLEET_TICK_SECONDS,
        "pool": "solo",
        "fleet": runs,
        "loadavg": services.loadavg(),
    }


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
    used = any(CLAIM_INDEX in line for line in plan)
    return {"uses_claimable_index": used, "index": CLAIM_INDEX, "plan": plan}


def history(sizes: list[int], pending: int, reps: int, batch_size: int = 100) -> dict[str, Any]:
    """For each size of the sent history (generated in SQL, growing from the smallest size to
    the largest in one database): the drain rate of ``pending`` new rows by the relay and by
    claim + mark alone, and the claim's plan. After each drain the drained rows are deleted
    again, so every run starts from exactly ``size`` sent rows."""
    out: dict[str, Any] = {"pending": pending, "batch_size": batch_size, "sizes": {}}
    with (
        services.database("history") as url,
        services.route(services.AMQP_URL, "history") as route,
    ):
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
                    (
                        "sql_only",
                        procs.module_command("bench.baselines", "sql"),
                        procs.BENCH_READY,
                        False,
                    ),
                ):
                    work = Workload(argv, ready, 1, batch_size, url, route)
                    result[label] = measure(work, pending, reps, check_queue=check, reset=reset)
                result["explain"] = plan
                out["sizes"][str(size)] = result
        finally:
            engine.dispose()
    return out
