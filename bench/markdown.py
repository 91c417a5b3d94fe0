"""The text of ``docs/benchmarks.md``: tables from ``bench.tables`` plus the honest notes."""

from __future__ import annotations

import json
from typing import Any

from bench.tables import grid_table, headline, rate, section_meta

_PUBLISH_LABELS = {
    "kombu_confirm_window_100": "Kombu channel, confirms awaited per 100",
    "kombu_confirm_window_1000": "Kombu channel, confirms awaited per 1,000",
    "kombu_confirm_window_all": "Kombu channel, confirms awaited once for all",
    "pyamqp_confirm_window_1000": "plain py-amqp, confirms awaited per 1,000",
    "kombu_confirm_each": "Kombu Producer, `confirm_publish` (waits for each ack)",
    "redis_kombu_publish_each": "Kombu Redis transport, one publish at a time (no confirms)",
}


def _meta(recs: dict[str, Any], name: str) -> str:
    return f"_{section_meta(recs[name])}._" if name in recs else ""


def _versions(env: dict[str, Any]) -> list[str]:
    keys = (
        "postgresql",
        "rabbitmq",
        "redis",
        "python",
        "kombu",
        "amqp",
        "sqlalchemy",
        "psycopg",
        "redis_py",
        "celery",
        "relay",
    )
    return [
        f"- Machine: {env.get('cpus')} CPUs ({env.get('cpu')}), {env.get('platform')}",
        "- Versions: " + ", ".join(f"{k} {env[k]}" for k in keys if k in env),
    ]


def _publish(data: dict[str, Any]) -> list[str]:
    out = [
        "| mode (persistent, mandatory, same messages as the relay) | msg/s | messages |",
        "| --- | --- | --- |",
    ]
    for key, r in data.items():
        out.append(f"| {_PUBLISH_LABELS.get(key, key)} | {rate(r)} | {r['messages']:,} |")
    return out


def _naive(data: dict[str, Any]) -> list[str]:
    out = ["| processes | rows/s | rows per run |", "| --- | --- | --- |"]
    out += [f"| {r['processes']} | {rate(r)} | {r['rows']:,} |" for r in data.values()]
    return out


def _latency(data: dict[str, Any]) -> list[str]:
    out = [
        "| poll interval | offered ev/s | achieved ev/s | p50 ms | p95 ms | p99 ms | max ms |"
        " events |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in sorted(data.values(), key=lambda r: (-r["tick_seconds"], r["offered_rate"])):
        out.append(
            f"| {r['tick_seconds']:g} s | {r['offered_rate']:,} | {r['achieved_rate']:,.0f} | "
            f"{r['p50_ms']:.0f} | {r['p95_ms']:.0f} | {r['p99_ms']:.0f} | {r['max_ms']:.0f} | "
            f"{r['received']:,}/{r['events']:,} |"
        )
    return out


def _history(data: dict[str, Any]) -> list[str]:
    out = [
        "| sent rows in the table | relay rows/s | claim + mark (no broker) rows/s | "
        "claim uses ix_outbox_claimable |",
        "| --- | --- | --- | --- |",
    ]
    for size in sorted(data.get("sizes", {}), key=int):
        r = data["sizes"][size]
        out.append(
            f"| {int(size):,} | {rate(r['relay'])} | {rate(r['sql_only'])} | "
            f"{'yes' if r['explain']['uses_claimable_index'] else '**no**'} |"
        )
    biggest = max(data.get("sizes", {"0": None}), key=int)
    if data.get("sizes"):
        out += [
            "",
            f"EXPLAIN (ANALYZE, BUFFERS) of the claim with {int(biggest):,} sent rows "
            f"and {data['pending']:,} pending:",
            "",
            "```",
        ]
        out += data["sizes"][biggest]["explain"]["plan"] + ["```"]
    return out


def _phases(data: dict[str, Any]) -> list[str]:
    if not data:
        return ["not run"]
    runs = sorted(data.values(), key=lambda r: r["batch_size"])
    phases = list(runs[0]["ms_per_batch"])
    out = [
        "| phase | "
        + " | ".join(f"batch {r['batch_size']}: ms per batch (share)" for r in runs)
        + " |",
        "| --- |" + " --- |" * len(runs),
    ]
    for phase in phases:
        cells = []
        for r in runs:
            ms, total = r["ms_per_batch"][phase], r["ms_per_batch"]["cycle total"]
            cells.append(f"{ms:.1f} ({ms / total:.0%})")
        out.append(f"| {phase} | " + " | ".join(cells) + " |")
    out.append("| rows/s in-process | " + " | ".join(f"{r['rate']:,.0f}" for r in runs) + " |")
    return out


def _raw(rec: dict[str, Any] | None) -> list[str]:
    """A section that reports itself as JSON (the Celery fleet, the wake-up latency)."""
    if rec is None:
        return ["not run"]
    return ["```json", _dump(rec["data"]), "```"]


def _versus(data: dict[str, Any]) -> list[str]:
    if not data:
        return ["not run"]
    out = [
        "| publisher | msg/s (queue growth) | from the commit / go | vs raw Kombu, per run |",
        "| --- | --- | --- | --- |",
    ]
    for name, r in data.items():
        if not isinstance(r, dict) or "median" not in r:
            continue
        label = "raw Kombu, confirms per 1,000" if name == "raw_kombu" else f"`{name}`"
        vs = r.get("vs_raw")
        ratios = (
            f"**{vs['median']:.2f}x** ({', '.join(f'{x:.2f}' for x in vs['runs'])})" if vs else "1x"
        )
        out.append(f"| {label} | {rate(r)} | {rate(r['from_start'])} | {ratios} |")
    return out


def _dump(value: Any) -> str:
    return json.dumps(value, indent=2, default=str)


def render(recs: dict[str, Any], res: dict[str, Any]) -> str:
    plan = next(iter(recs.values()))["plan"] if recs else "none"
    command = next(iter(recs.values()))["command"] if recs else "python -m bench"
    quick = plan == "quick"
    lines = ["# Benchmarks", ""]
    if quick:
        lines += [
            "> **QUICK RUN (`--quick`): small sizes, one run each. These figures show the "
            "harness works; they are not the published measurements.** Run `make bench` "
            "on a quiet machine for those.",
            "",
        ]
    finished = max(r["finished_at"] for r in recs.values()) if recs else "-"
    lines += [
        f"Generated by `{command}` ({plan} plan), finished {finished}. Every figure below comes "
        "from that one run on one machine. Regenerate the text from the saved JSON with "
        "`python -m bench --report-only`.",
        "",
        "## Headline",
        "",
        *headline(res),
        "",
        "![throughput](img/bench-throughput.png)",
        "",
        "Why the relay reaches about 0.4x of the publish-only ceiling on this machine, what was "
        "profiled and changed, and the per-event CPU split: `docs/performance.md`.",
        "",
        "### The relay against raw Kombu, issue 14's measure (`bench/versus.py`)",
        _meta(recs, "versus"),
        "",
        f"{res.get('versus', {}).get('processes', 4)} `relay dispatch --loop` processes at the "
        f"defaults against as many raw Kombu publishers (a confirm-mode channel, confirms "
        f"awaited per 1,000, messages built before the clock), "
        f"{res.get('versus', {}).get('events', 0):,} events each run, the modes taking turns "
        "in the same run. Rates are read from the growth of a bound queue's depth while no "
        "consumer runs (passive `queue_declare` every 20 ms); every run left exactly the "
        "events in the queue. `relay@REV` is the relay of an earlier revision in the same run: "
        "`4233c54` is before issue 14, `b74b0e9` has the publisher seam but still publishes "
        "through Kombu + py-amqp; `relay` encodes a batch's frames itself.",
        "",
        *_versus(res.get("versus", {})),
        "",
        "## What these figures depend on",
        "",
        *_versions(res.get("env", {})),
        "- **Two shared cores.** PostgreSQL, RabbitMQ (or Redis), the relay processes, the "
        "producer and the harness all run on the same 2 CPUs, on loopback. Adding relay "
        "processes takes CPU from the broker and the database, so 4 processes are rarely twice "
        "2. The load average at the start and end of each section is recorded next to it; "
        "other work on the machine moves absolute figures by 10-30% or more. Compare ratios "
        "measured in the same run, not absolute rates across runs.",
        "- **Medians of several runs** (the plan's `reps`), with ± half the min..max spread; "
        "the raw runs are in `bench/results/*.json`.",
        "- **Rates** are rows moved from `pending` to `sent` per second, timed from the commit "
        "that made them visible to the moment none is pending or processing. Workers are "
        "started and idle before the clock starts (`RELAY_TICK_SECONDS=0.05` while idle).",
        "- **Messages** are the relay's wire format (DESIGN.md §1.3): ~210-byte JSON body, the "
        "relay's headers plus two custom ones, persistent, `mandatory`, into one durable queue "
        "bound with `#`. Each run has its own exchange and queue, deleted afterwards, and its "
        "own database, dropped afterwards.",
        "- PostgreSQL runs with its defaults (`synchronous_commit=on`, `fsync=on`); Redis runs "
        'without persistence, so a "persistent" message on Redis survives nothing.',
        "",
        "## 1. Ceilings",
        "",
        "### Publishing only, no database",
        _meta(recs, "publish_ceiling"),
        "",
        *_publish(res.get("publish_ceiling", {})),
        "",
        "Messages are built before the clock starts: this is the transport's limit.",
        "",
        "### Claim + mark sent only, no broker (`relay.store.Store`)",
        _meta(recs, "sql_ceiling"),
        "",
        *(grid_table(res["sql_ceiling"]) if "sql_ceiling" in res else ["not run"]),
        "",
        "## 2. The naive relay (`bench/naive.py`, a baseline, not the product)",
        "",
        "One row per transaction: `SELECT … LIMIT 1 FOR UPDATE SKIP LOCKED`, publish with "
        "Kombu's `confirm_publish` (one ack round trip), `UPDATE … SET status='sent'`, commit.",
        _meta(recs, "naive"),
        "",
        *_naive(res.get("naive", {})),
        "",
        "## 3. This relay: `relay dispatch --loop`",
        "",
        "### PostgreSQL + RabbitMQ",
        _meta(recs, "relay_rabbitmq"),
        "",
        *(grid_table(res["relay_rabbitmq"]) if "relay_rabbitmq" in res else ["not run"]),
        "",
        "### PostgreSQL + Redis (`RELAY_EVENTS_URL=redis://…`)",
        _meta(recs, "relay_redis"),
        "",
        *(grid_table(res["relay_redis"]) if "relay_redis" in res else ["not run"]),
        "",
        "### Where one relay process spends its time",
        _meta(recs, "relay_phases"),
        "",
        "`Dispatcher.drain()` in-process on PostgreSQL + RabbitMQ with a timer around each "
        "phase (`message.build` runs inside the publish phase). Claim and outcome recording "
        "are separate commits that run strictly before and after the broker I/O, so their time "
        "adds to every batch.",
        "",
        *_phases(res.get("relay_phases", {})),
        "",
        "### The Celery fleet (`celery -A relay worker`)",
        "",
        *_raw(recs.get("fleet")),
        "",
        "## 4. Latency, commit to consumer",
        "",
        "### Wake-up off: polling only",
        _meta(recs, "latency_polling"),
        "",
        "One `relay dispatch --loop` process, batch 100, resting `RELAY_TICK_SECONDS` whenever a "
        "claim comes back short. A producer process commits every 10 ms a transaction holding "
        "rate/100 events; a consumer process timestamps each arrival (same clock).",
        "",
        *_latency(res.get("latency_polling", {})),
        "",
        "![latency](img/bench-latency-polling.png)",
        "",
        "### Wake-up on (after-commit hook / NOTIFY, needs the Celery fleet)",
        "",
        *_raw(recs.get("latency_wakeup")),
        "",
        "## 5. History scaling",
        _meta(recs, "history"),
        "",
        "Drain rate of the pending rows (1 process, batch 100) with the sent history generated "
        "in SQL (`INSERT … SELECT generate_series`, then `VACUUM ANALYZE`).",
        "",
        *_history(res.get("history", {})),
        "",
        "![history](img/bench-history.png)",
        "",
        "## Reproduce",
        "",
        "```sh",
        "make bench          # python -m bench: the full plan, ~15-25 minutes",
        "make bench-quick    # python -m bench --quick: smoke test, < 2 minutes, no timing "
        "asserted",
        "python -m bench --only relay_rabbitmq naive   # some sections",
        "python -m bench --report-only                 # rebuild this page from JSON",
        "```",
        "",
        "Services: PostgreSQL on 127.0.0.1:5432 (user postgres), RabbitMQ on 5672 "
        "(guest/guest), Redis on 6379; override with `BENCH_POSTGRES_URL`, `BENCH_AMQP_URL`, "
        "`BENCH_REDIS_URL`.",
        "",
    ]
    return "\n".join(lines)
