"""PNG plots of the results (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def _grid_series(grid: dict[str, Any]) -> dict[int, list[tuple[int, float, float, float]]]:
    series: dict[int, list[tuple[int, float, float, float]]] = {}
    for r in grid.values():
        series.setdefault(r["processes"], []).append(
            (r["batch_size"], r["median"], r["min"], r["max"])
        )
    return {p: sorted(v) for p, v in sorted(series.items())}


def throughput(results: dict[str, Any], path: Path) -> None:
    """Relay rows/s by batch size and process count, next to the ceilings and the naive relay."""
    panels = [
        (k, t)
        for k, t in (
            ("relay_rabbitmq", "PostgreSQL + RabbitMQ"),
            ("relay_redis", "PostgreSQL + Redis"),
        )
        if k in results
    ]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    ceil = results.get("publish_ceiling", {})
    naive = results.get("naive", {})
    for ax, (key, title) in zip(axes[0], panels, strict=True):
        for procs, pts in _grid_series(results[key]).items():
            xs = [p[0] for p in pts]
            ax.errorbar(
                xs,
                [p[1] for p in pts],
                yerr=[[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]],
                marker="o",
                capsize=3,
                label=f"relay, {procs} process{'es' if procs > 1 else ''}",
            )
        if key == "relay_rabbitmq":
            for name, style in (
                ("kombu_confirm_window_100", ":"),
                ("kombu_confirm_window_all", "--"),
            ):
                if name in ceil:
                    label = "ceiling: confirms per " + name.rsplit("_", 1)[1]
                    ax.axhline(ceil[name]["median"], linestyle=style, color="k", label=label)
            if naive:
                best = max(r["median"] for r in naive.values())
                ax.axhline(best, color="tab:red", linestyle="-.", label="naive relay (best)")
        elif "redis_kombu_publish_each" in ceil:
            ax.axhline(
                ceil["redis_kombu_publish_each"]["median"],
                linestyle="--",
                color="k",
                label="ceiling: Kombu Redis publish, one at a time",
            )
        ax.set_xscale("log")
        ax.set_xlabel("batch size (RELAY_BATCH_SIZE)")
        ax.set_ylabel("rows/s (median, bars = min..max)")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def latency(data: dict[str, Any], path: Path) -> None:
    """p50/p95/p99 commit-to-consumer latency by offered load, polling only."""
    if not data:
        return
    ticks = sorted({r["tick_seconds"] for r in data.values()})
    fig, axes = plt.subplots(1, len(ticks), figsize=(5.5 * len(ticks), 4), squeeze=False)
    for ax, tick in zip(axes[0], ticks, strict=True):
        runs = sorted(
            (r for r in data.values() if r["tick_seconds"] == tick), key=lambda r: r["offered_rate"]
        )
        rates = [r["offered_rate"] for r in runs]
        for q in ("p50_ms", "p95_ms", "p99_ms"):
            ax.plot(rates, [r[q] for r in runs], marker="o", label=q.replace("_ms", ""))
        ax.set_xscale("log")
        ax.set_xlabel("offered load (events/s)")
        ax.set_ylabel("commit -> consumer (ms)")
        ax.set_title(f"wake-up off, poll every {tick:g}s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def history(data: dict[str, Any], path: Path) -> None:
    """Drain rate of the pending rows by size of the sent history."""
    sizes = data.get("sizes", {})
    if not sizes:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    keys = sorted(sizes, key=int)
    xs = range(len(keys))
    width = 0.38
    for offset, (label, name) in zip(
        (-width / 2, width / 2),
        (("relay (RabbitMQ)", "relay"), ("claim + mark sent, no broker", "sql_only")),
        strict=True,
    ):
        ax.bar(
            [x + offset for x in xs], [sizes[k][name]["median"] for k in keys], width, label=label
        )
    ax.set_xticks(list(xs), [f"{int(k):,}" for k in keys])
    ax.set_xlabel("sent rows already in the table")
    ax.set_ylabel(f"rows/s draining {data['pending']:,} pending")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
