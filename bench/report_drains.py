"""The tables of the per-key ordering drain, its producers and the large events sections for
``docs/benchmarks.md`` (``bench/ordering.py``'s and ``bench/large.py``'s JSON)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

#: How the report draws a Markdown table (``bench.report.table``), handed in by the report.
Table = Callable[[Sequence[str], Iterable[Sequence[Any]]], str]
#: The report's targets (``bench.report.TARGETS``), by name.
Targets = Mapping[str, Any]


def ordering_drain(data: dict[str, Any], table: Table, targets_: Targets) -> str:
    targets = {1: targets_["ordering_1"], 10: targets_["ordering_10"]}
    rows = []
    for backend in ("postgresql", "mariadb"):
        found = data.get(backend, {})
        modes = {"relay": found.get("drain", {}), **found.get("baselines", {})}
        for mode, drain in modes.items():
            for keys, row in drain.items():
                target = targets.get(int(keys)) if mode == "relay" else None
                verdict = f"{target.value}x: " + target.verdict(row["vs_unkeyed"]) if target else ""
                runs = ", ".join(f"{r:,}" for r in row["runs"])
                label = "none" if keys == "0" else keys
                cells = [f"{row['median']:,}", runs, f"{row['vs_unkeyed']}x", verdict]
                rows.append([backend, mode, label, *cells])
    header = ["database", "relay", "keys", "events/s", "runs", "vs without keys", "target"]
    return table(header, rows)


def large(data: dict[str, Any], table: Table, targets_: Targets) -> str:
    """The ``large`` section's table: per relay and case, drain seconds and peak RSS."""
    rows = []
    for mode in [k for k in data if k == "relay" or k.startswith("relay@")]:
        for case, row in data[mode].items():
            runs = ", ".join(f"{r:g}" for r in row["runs"])
            verdicts = ""
            if mode == "relay":
                t, r = targets_["large_seconds"], targets_["large_rss"]
                verdicts = f"{t.verdict(row['seconds'])}, {r.verdict(row['peak_rss_mib'])}"
            cells = [f"{row['seconds']:g}", runs, f"{row['mib_per_s']:g}"]
            rows.append([mode, case, *cells, f"{row['peak_rss_mib']:,}", verdicts])
    header = ["relay", "table", "seconds", "runs", "MiB/s", "peak RSS MiB", "< 15 s, < 512 MiB"]
    return table(header, rows)


def ordering_producers(data: dict[str, Any], table: Table, targets_: Targets) -> str:
    rows = []
    for backend in ("postgresql", "mariadb"):
        prod = data.get(backend, {}).get("producer", {})
        for producers in (1, 4):
            cells = [prod.get(f"p{producers} {m}", 0) for m in ("unkeyed", "100 keys", "one key")]
            base = cells[0] or 1
            rows.append(
                [backend, producers, f"{cells[0]:,}"]
                + [f"{c:,} ({c / base:.2f}x)" for c in cells[1:]]
            )
    header = ["database", "producers", "unkeyed", "key drawn from 100", "one shared key"]
    return table(header, rows)
