"""This relay (``relay dispatch --loop``) and the naive relay, draining the same rows."""

from __future__ import annotations

from typing import Any

from bench import procs
from bench.drain import Workload, grid, measure
from bench.fixtures import Route


def relay_grid(
    database_url: str,
    route: Route,
    count: int,
    reps: int,
    processes: list[int],
    batches: list[int],
) -> dict[str, Any]:
    """``relay dispatch --loop`` in 1/2/4 processes at each batch size; rows/s."""
    return grid(
        procs.relay_command(),
        procs.RELAY_READY,
        database_url,
        route,
        count,
        reps,
        processes,
        batches,
    )


def naive(
    database_url: str, route: Route, count: int, reps: int, processes: list[int]
) -> dict[str, Any]:
    """The naive relay (``bench.naive``) in 1/2/4 processes; rows/s."""
    out: dict[str, Any] = {}
    for n in processes:
        work = Workload(
            argv=procs.module_command("bench.naive"),
            ready=procs.BENCH_READY,
            processes=n,
            batch_size=1,
            database_url=database_url,
            route=route,
        )
        out[f"p{n}"] = measure(work, count, reps)
    return out
