"""``python -m bench [--quick] [--only SECTION ...] [--reps N]``: run, save JSON, write the report.

Every section is one function of the plan returning a JSON-able dict, saved as
``bench/results/<section>.json``; the report is rebuilt from all saved sections afterwards
(``--report-only`` rebuilds it without measuring).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import (
    application,
    baselines,
    console,
    costs,
    fairness,
    idle,
    jetstream,
    large,
    latency,
    migrations,
    ordering,
    producers,
    replay,
    report,
    retention,
    services,
    tenants,
    throughput,
    versus,
    writers,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
QUICK_RESULTS = RESULTS / "tmp-quick"  # ignored by git (bench/results/tmp*)


@dataclass(frozen=True)
class Plan:
    """Sizes of one run, every section's in one place: the full plan and the quick smoke test."""

    name: str
    reps: int
    publish_messages: int
    grid_rows: int
    processes: list[int]
    batches: list[int]
    #: The database ceiling beside PostgreSQL's grid: (processes, batches) on the others.
    other_databases: tuple[list[int], list[int]]
    naive_rows: int
    naive_processes: list[int]
    redis_processes: list[int]
    redis_batches: list[int]
    fleet_events: int
    fleet_workers: list[int]
    history_sizes: list[int]
    history_pending: int
    cpu_events: int
    cpu_processes: int
    latency_rates: list[int]
    latency_ticks: list[float]
    latency_seconds: float
    hook_events: int
    hook_seconds: float
    hook_rates: list[int]
    wakeup_seconds: float
    wakeup_idle: float
    wakeup_rates: list[int]
    ordering_events: int
    ordering_producer_seconds: float
    metrics_rows: int
    metrics_reps: int
    metrics_hook_batches: int
    metrics_history: int
    console_rows: int
    console_reps: int
    console_far_page: int
    consumer_events: int
    tasks: int
    #: bench.writers: writers per run (single-row, business transactions), seconds per run.
    writers: list[int] = field(default_factory=lambda: [1, 8, 32, 64])
    business_writers: list[int] = field(default_factory=lambda: [1, 8, 32])
    #: Writers per run of the price of each index alone.
    index_writers: list[int] = field(default_factory=lambda: [1, 32])
    writers_seconds: float = 3.0
    #: bench.writers_relayed (issue 27's measure: beside relays, both sides relayed): seconds
    #: per run and repetitions, more than the rest, as one side's run moves by up to 2x.
    writers_relayed_seconds: float = 5.0
    writers_relayed_reps: int = 7
    #: bench.producers: producer processes per run, seconds per run.
    producers_processes: list[int] = field(default_factory=lambda: [1, 4])
    producers_seconds: float = 4.0
    #: bench.versus: events per run, processes per side, other revisions of the relay beside it.
    versus_events: int = 20_000
    versus_processes: int = 4
    baselines: list[str] = field(default_factory=list)
    #: bench.versus: the checkout's relay again with other settings (``KEY=VALUE[,KEY=VALUE]``).
    variants: list[str] = field(default_factory=list)
    #: bench.fairness: the busy database's backlog, the quiet one's events/s and seconds per
    #: phase, and the relay process counts.
    fairness_backlog: int = 200_000
    fairness_rate: float = 20.0
    fairness_seconds: float = 8.0
    fairness_processes: list[int] = field(default_factory=lambda: [1, 2])
    #: bench.tenants: database counts, events per database, trickle seconds, and the noisy
    #: tenant's backlog beside the largest count.
    tenants_counts: list[int] = field(default_factory=lambda: [10, 100, 200])
    tenants_backlog: int = 100
    tenants_trickle_seconds: float = 10.0
    tenants_noisy: int = 200_000
    tenants_celery_workers: int = 4
    #: bench.retention: minutes of each sustained run, the catch-up's backlog of sent rows past
    #: the retention, and the producer's rate (``--minutes``, ``--backlog``, ``--rate``).
    retention_minutes: float = 20.0
    retention_backlog: int = 10_000_000
    retention_rate: int = 10_000
    #: The run without purges, minutes (``--baseline-minutes``; None: as long as the others).
    retention_baseline_minutes: float | None = None
    #: bench.replay (issue 41): sent rows replayed, the replay's --rate, the live producer's
    #: events a second, and seconds of each live window.
    replay_rows: int = 1_000_000
    replay_rate: int = 5_000
    replay_live_rate: int = 200
    replay_seconds: float = 60.0
    #: bench.migrations (issue 48): sent rows on each database, and how long the report holds
    #: the outbox open while ``relay migrate`` runs.
    migrations_pg_rows: int = 1_000_000
    migrations_mariadb_rows: int = 300_000
    migrations_report_seconds: float = 8.0
    #: bench.idle (issue 51): seconds of the idle window, first-event samples after it and the
    #: silence before each.
    idle_seconds: float = 60.0
    idle_samples: int = 5
    idle_gap: float = 3.0


FULL = Plan(
    name="full",
    reps=3,
    publish_messages=20_000,
    grid_rows=10_000,
    processes=[1, 2, 4],
    batches=[10, 100, 500],
    other_databases=([1, 4], [100]),
    naive_rows=3_000,
    naive_processes=[1, 2, 4],
    redis_processes=[1, 2, 4],
    redis_batches=[10, 100, 500],
    fleet_events=20_000,
    fleet_workers=[1, 2, 3],
    history_sizes=[0, 1_000_000, 5_000_000],
    history_pending=10_000,
    cpu_events=20_000,
    cpu_processes=4,
    latency_rates=[100, 1_000, 5_000],
    latency_ticks=[1.0, 0.1],
    latency_seconds=10.0,
    hook_events=200,
    hook_seconds=5.0,
    hook_rates=[100, 1_000, 5_000],
    wakeup_seconds=10.0,
    wakeup_idle=20.0,
    wakeup_rates=[200, 2_000],
    ordering_events=10_000,
    ordering_producer_seconds=3.0,
    metrics_rows=20_000,
    metrics_reps=5,
    metrics_hook_batches=2_000,
    metrics_history=1_000_000,
    console_rows=1_000_000,
    console_reps=9,
    console_far_page=500,
    consumer_events=5_000,
    tasks=2_000,
)

QUICK = Plan(
    name="quick",
    reps=1,
    publish_messages=2_000,
    grid_rows=2_000,
    processes=[1, 2],
    batches=[100],
    other_databases=([1], [100]),
    naive_rows=300,
    naive_processes=[1],
    redis_processes=[1],
    redis_batches=[100],
    fleet_events=3_000,
    fleet_workers=[1],
    history_sizes=[0, 100_000],
    history_pending=2_000,
    cpu_events=2_000,
    cpu_processes=1,
    latency_rates=[100, 1_000],
    latency_ticks=[0.2],
    latency_seconds=2.0,
    hook_events=20,
    hook_seconds=1.0,
    hook_rates=[100],
    wakeup_seconds=1.0,
    wakeup_idle=1.0,
    wakeup_rates=[200],
    ordering_events=2_000,
    ordering_producer_seconds=0.5,
    metrics_rows=5_000,
    metrics_reps=2,
    metrics_hook_batches=200,
    metrics_history=100_000,
    console_rows=60_000,
    console_reps=3,
    console_far_page=20,
    consumer_events=500,
    tasks=200,
    versus_events=2_000,
    writers=[1, 8],
    business_writers=[1],
    index_writers=[8],
    writers_seconds=1.0,
    writers_relayed_seconds=1.0,
    writers_relayed_reps=1,
    fairness_backlog=60_000,
    fairness_seconds=3.0,
    fairness_processes=[1],
    tenants_counts=[10, 20],
    tenants_trickle_seconds=5.0,
    tenants_noisy=30_000,
    tenants_celery_workers=2,
    producers_processes=[1],
    producers_seconds=0.5,
    retention_minutes=0.5,
    retention_backlog=20_000,
    retention_rate=500,
    replay_rows=30_000,
    replay_seconds=3.0,
    migrations_pg_rows=20_000,
    migrations_mariadb_rows=10_000,
    migrations_report_seconds=2.0,
    idle_seconds=10.0,
    idle_samples=2,
    idle_gap=2.0,
)

#: The setting the ``delete_on_send`` section runs the relay with beside its defaults.
DELETE_ON_SEND = "RELAY_DELETE_ON_SEND=1"

#: The sections, in the order a full run measures them.
SECTIONS: dict[str, Callable[[Plan], dict[str, Any]]] = {
    "env": lambda p: services.versions(),
    "versus": lambda p: versus.run(
        services.AMQP_URL, p.versus_events, p.reps, p.versus_processes, p.baselines, p.variants
    ),
    # Issue 25: deleting rows at send against keeping them, beside raw Kombu, in one run.
    "delete_on_send": lambda p: versus.run(
        services.AMQP_URL, p.versus_events, p.reps, p.versus_processes, [], [DELETE_ON_SEND]
    ),
    "publish_ceiling": lambda p: baselines.publish_ceilings(
        p.publish_messages, p.reps, [100, 1000, 0]
    ),
    "sql_ceiling": lambda p: baselines.sql_ceiling(
        p.grid_rows,
        p.reps,
        {
            "postgresql": (p.processes, p.batches),
            "mariadb": p.other_databases,
            "sqlite": p.other_databases,
        },
    ),
    "naive": lambda p: baselines.naive(p.naive_rows, p.reps, p.naive_processes),
    "relay_rabbitmq": lambda p: throughput.relay_grid(
        services.AMQP_URL, p.grid_rows, p.reps, p.processes, p.batches
    ),
    "relay_redis": lambda p: throughput.relay_grid(
        services.REDIS_URL, p.grid_rows, p.reps, p.redis_processes, p.redis_batches
    ),
    "relay_phases": lambda p: costs.phases(p.grid_rows, [100, 500]),
    "cpu_split": lambda p: costs.cpu_split(p.cpu_events, 100, p.cpu_processes),
    "latency_polling": lambda p: latency.polling(
        p.latency_rates, p.latency_ticks, p.latency_seconds
    ),
    "history": lambda p: throughput.history(p.history_sizes, p.history_pending, p.reps),
    "fleet": lambda p: throughput.fleet(p.fleet_events, p.fleet_workers),
    "latency_wakeup": lambda p: latency.hook(p.hook_events, p.hook_seconds, p.hook_rates),
    "ordering": lambda p: ordering.run(
        p.ordering_events, p.reps, p.ordering_producer_seconds, p.baselines
    ),
    # Issue 51: 600 events of 900 KiB through one relay, drain time and peak RSS.
    "large": lambda p: large.run(60 if p.name == "quick" else 600, p.reps, p.baselines),
    "wakeup": lambda p: latency.wakeup(p.wakeup_seconds, p.wakeup_idle, p.wakeup_rates, 0.005),
    "metrics_cost": lambda p: costs.metrics(
        p.metrics_rows, p.metrics_reps, p.metrics_hook_batches, p.metrics_history
    ),
    # Issue 50: the relay's JetStream publisher against raw nats-py, in one run.
    "jetstream": lambda p: jetstream.run(1000 if p.name == "quick" else 20_000, p.reps),
    "console": lambda p: console.run(p.console_rows, p.console_reps, p.console_far_page),
    "consumer": lambda p: application.consumer(p.consumer_events, p.reps),
    "tasks": lambda p: application.tasks(p.tasks),
    "writers": lambda p: writers.run(
        p.writers,
        p.business_writers,
        p.writers_seconds,
        p.reps,
        p.index_writers,
        relayed=(p.writers_relayed_seconds, p.writers_relayed_reps),
    ),
    "fairness": lambda p: fairness.run(
        p.fairness_backlog, p.fairness_rate, p.fairness_seconds, p.fairness_processes
    ),
    "tenants": lambda p: tenants.run(
        p.tenants_counts,
        p.tenants_backlog,
        p.tenants_trickle_seconds,
        p.tenants_noisy,
        p.tenants_celery_workers,
    ),
    "producers": lambda p: producers.run(p.producers_processes, p.producers_seconds, p.reps),
    "retention": lambda p: retention.run(
        services.AMQP_URL,
        p.retention_minutes,
        p.retention_backlog,
        p.retention_rate,
        baseline_minutes=p.retention_baseline_minutes,
    ),
    "replay": lambda p: replay.run(
        p.replay_rows, p.replay_rate, p.replay_live_rate, p.replay_seconds
    ),
    "migrations": lambda p: migrations.run(
        p.migrations_pg_rows, p.migrations_mariadb_rows, p.migrations_report_seconds
    ),
    # Issue 51: an idle relay's CPU and database transactions, and its first event after them.
    "idle": lambda p: idle.run(p.idle_seconds, p.idle_samples, p.idle_gap, p.baselines),
}


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="small sizes, one run: a smoke test")
    p.add_argument("--only", nargs="+", choices=list(SECTIONS), help="run only these sections")
    p.add_argument("--results", type=Path, help="where the JSON goes (default by mode)")
    p.add_argument("--docs", type=Path, help="where the report goes (default by mode)")
    p.add_argument("--report-only", action="store_true", help="rebuild the report from JSON")
    p.add_argument(
        "--reps",
        type=int,
        metavar="N",
        help="repetitions of each measurement that takes the common count (default 3, quick 1)",
    )
    p.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="REV",
        help="versus, idle, ordering, large: also run the relay of this git revision (repeatable)",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="versus: also run this checkout's relay with these settings (repeatable)",
    )
    p.add_argument("--minutes", type=float, help="retention: minutes of each sustained run")
    p.add_argument("--backlog", type=int, help="retention: sent rows past the retention")
    p.add_argument("--rate", type=int, help="retention: the producer's rows a second")
    p.add_argument(
        "--baseline-minutes", type=float, help="retention: minutes of the run without purges"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    plan = replace(QUICK if args.quick else FULL, baselines=args.baseline, variants=args.variant)
    for name in ("minutes", "backlog", "rate", "baseline_minutes"):
        if getattr(args, name) is not None:
            plan = replace(plan, **{f"retention_{name}": getattr(args, name)})
    if args.reps is not None:
        if args.reps < 1:
            raise SystemExit("python -m bench: --reps must be 1 or more")
        plan = replace(plan, reps=args.reps)
    results = args.results or (QUICK_RESULTS if args.quick else RESULTS)
    docs = args.docs or (results / "benchmarks.md" if args.quick else ROOT / "docs/benchmarks.md")
    results.mkdir(parents=True, exist_ok=True)
    command = "python -m bench " + shlex.join(sys.argv[1:] if argv is None else argv)
    if not args.report_only:
        for name in args.only or list(SECTIONS):
            run_section(name, plan, results, command.strip())
    out = report.write(results, docs)
    print(f"bench: report written to {out}")
    return 0


def run_section(name: str, plan: Plan, results: Path, command: str) -> None:
    load_before = services.loadavg()
    started = time.perf_counter()
    # The code the section starts on, not what was committed while it ran.
    commit = services.git_revision()
    print(f"bench: {name} (load {load_before[0]:.2f}) ...", flush=True)
    data = SECTIONS[name](plan)
    record = {
        "section": name,
        "plan": plan.name,
        "command": command,
        "commit": commit,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - started, 1),
        "loadavg_before": load_before,
        "loadavg_after": services.loadavg(),
        "data": data,
    }
    (results / f"{name}.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    print(f"bench: {name} done in {record['seconds']}s", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
