"""The text of ``docs/benchmarks.md``: tables from ``bench.tables`` plus the honest notes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from string import Template
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


#: The report's prose, with a ``${name}`` for each table and figure (``string.Template``).
TEMPLATE = Path(__file__).with_name("report_template.md")
_QUICK_BANNER = (
    "> **QUICK RUN (`--quick`): small sizes, one run each. These figures show the harness "
    "works; they are not the published measurements.** Run `make bench` on a quiet machine "
    "for those.\n\n"
)
#: Sections rendered as a table, by the function that renders their data.
_TABLES: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "publish_ceiling": _publish,
    "sql_ceiling": lambda data: grid_table(data) if data else ["not run"],
    "naive": _naive,
    "relay_rabbitmq": lambda data: grid_table(data) if data else ["not run"],
    "relay_redis": lambda data: grid_table(data) if data else ["not run"],
    "relay_phases": _phases,
    "latency_polling": _latency,
    "history": _history,
    "versus": _versus,
}


def render(recs: dict[str, Any], res: dict[str, Any]) -> str:
    first = next(iter(recs.values()), {})
    plan = first.get("plan", "none")
    versus = res.get("versus", {})
    values: dict[str, str] = {
        "quick_banner": _QUICK_BANNER if plan == "quick" else "",
        "command": first.get("command", "python -m bench"),
        "plan": plan,
        "finished": max(r["finished_at"] for r in recs.values()) if recs else "-",
        "headline": "\n".join(headline(res)),
        "versions": "\n".join(_versions(res.get("env", {}))),
        "versus_processes": str(versus.get("processes", 4)),
        "versus_events": f"{versus.get('events', 0):,}",
        "fleet": "\n".join(_raw(recs.get("fleet"))),
        "latency_wakeup": "\n".join(_raw(recs.get("latency_wakeup"))),
    }
    for name, table in _TABLES.items():
        values[name] = "\n".join(table(res.get(name, {})))
        values[f"{name}_meta"] = _meta(recs, name)
    return Template(TEMPLATE.read_text()).substitute(values)
