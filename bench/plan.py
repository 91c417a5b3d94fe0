"""What a run measures: the full plan (``python -m bench``) and the quick smoke test."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Plan:
    """Sizes and grids of one run; every section reads its part."""

    name: str
    reps: int
    publish_messages: int
    windows: list[int]
    grid_rows: int
    processes: list[int]
    batches: list[int]
    naive_rows: int
    naive_processes: list[int]
    latency_rates: list[int]
    latency_ticks: list[float]
    latency_seconds: float
    history_sizes: list[int]
    history_pending: int
    history_reps: int
    redis_processes: list[int] = field(default_factory=list)
    redis_batches: list[int] = field(default_factory=list)
    #: bench.versus: events per run, processes per side, other revisions of the relay beside it.
    versus_events: int = 20_000
    versus_processes: int = 4
    baselines: list[str] = field(default_factory=list)


FULL = Plan(
    name="full",
    reps=3,
    publish_messages=20_000,
    windows=[100, 1000, 0],
    grid_rows=10_000,
    processes=[1, 2, 4],
    batches=[10, 100, 500],
    naive_rows=3_000,
    naive_processes=[1, 2, 4],
    latency_rates=[100, 1_000, 5_000],
    latency_ticks=[1.0, 0.1],
    latency_seconds=10.0,
    history_sizes=[0, 1_000_000, 5_000_000],
    history_pending=10_000,
    history_reps=3,
    redis_processes=[1, 2, 4],
    redis_batches=[10, 100, 500],
)

QUICK = Plan(
    name="quick",
    reps=1,
    publish_messages=2_000,
    windows=[100, 1000, 0],
    grid_rows=2_000,
    processes=[1, 2],
    batches=[100],
    naive_rows=300,
    naive_processes=[1],
    latency_rates=[100, 1_000],
    latency_ticks=[0.2],
    latency_seconds=2.0,
    history_sizes=[0, 100_000],
    history_pending=2_000,
    history_reps=1,
    redis_processes=[1],
    redis_batches=[100],
    versus_events=2_000,
)
