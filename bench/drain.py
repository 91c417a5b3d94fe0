"""The throughput harness: workers wait on an empty outbox, N rows commit at once, and the rate
is N over the time from that commit until no row is pending or processing."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from bench import procs, rows
from bench.fixtures import Route
from bench.stats import summarize


@dataclass(frozen=True)
class Workload:
    """``argv`` run ``processes`` times against ``database_url``, publishing to ``route``."""

    argv: Sequence[str]
    ready: str
    processes: int
    batch_size: int
    database_url: str
    route: Route
    extra_env: Mapping[str, str] | None = None

    def env(self) -> dict[str, str]:
        return {
            "RELAY_DATABASE_URL": self.database_url,
            "RELAY_BROKER_URL": self.route.url,
            "RELAY_EVENTS_URL": self.route.url,
            "RELAY_EXCHANGE": self.route.exchange_name,
            "RELAY_BATCH_SIZE": str(self.batch_size),
            # The empty-outbox rest: short, so a drain starts within 50 ms of the commit.
            "RELAY_TICK_SECONDS": "0.05",
            **(self.extra_env or {}),
        }


def truncate(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE outbox"))


def measure(
    work: Workload,
    count: int,
    reps: int,
    *,
    timeout: float = 600.0,
    check_queue: bool = True,
    reset: Callable[[sa.Engine], None] = truncate,
) -> dict[str, Any]:
    """Drain ``count`` rows ``reps`` times with one set of workers; rates in rows/s.

    ``reset`` runs before the workers start and after every drain (default: empty the table).
    """
    engine = sa.create_engine(work.database_url)
    rates: list[float] = []
    delivered: list[int] = []
    try:
        reset(engine)
        work.route.purge()
        with procs.workers(work.argv, work.env(), work.processes, ready=work.ready) as running:
            time.sleep(0.3)  # let every worker finish its first (empty) claim
            for _ in range(reps):
                rates.append(_one_drain(engine, count, running, timeout))
                if check_queue:
                    delivered.append(work.route.depth())
                work.route.purge()
                reset(engine)
    finally:
        engine.dispose()
    result = summarize(rates)
    result.update(rows=count, processes=work.processes, batch_size=work.batch_size)
    if check_queue:
        result["delivered"] = delivered
        if any(d != count for d in delivered):
            result["warning"] = f"queue held {delivered} messages, expected {count} each run"
    return result


def grid(
    argv: Sequence[str],
    ready: str,
    database_url: str,
    route: Route,
    count: int,
    reps: int,
    processes: list[int],
    batches: list[int],
    *,
    check_queue: bool = True,
) -> dict[str, Any]:
    """:func:`measure` for every (processes, batch size), keyed ``p<N>_b<batch>``; rows/s."""
    out: dict[str, Any] = {}
    for n in processes:
        for batch in batches:
            work = Workload(argv, ready, n, batch, database_url, route)
            out[f"p{n}_b{batch}"] = measure(work, count, reps, check_queue=check_queue)
    return out


def _one_drain(engine: sa.Engine, count: int, running: Any, timeout: float) -> float:
    rows.insert_pending(engine, count)
    committed = time.perf_counter()
    deadline = committed + timeout
    while rows.unfinished(engine):
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{count} rows not drained within {timeout:g}s")
        procs.check_alive(running)
        time.sleep(0.02)
    return count / (time.perf_counter() - committed)
