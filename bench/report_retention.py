"""The retention section's table for ``docs/benchmarks.md`` (``bench/retention.py``'s JSON)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

#: How the report draws a Markdown table (``bench.report.table``), handed in by the report.
Table = Callable[[Sequence[str], Iterable[Sequence[Any]]], str]

RUNS = (
    ("without_purges", "sustained, purger never due"),
    ("with_purges", "sustained, purger on"),
    ("catchup", "catch-up from the backlog, purger on"),
)


def _n(x: float | None, unit: str = "") -> str:
    return "-" if x is None else f"{x:,.0f}{unit}"


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _range(span: list[int] | None, scale: float = 1.0) -> str:
    if not span:
        return "-"
    low, high = (x / scale for x in span)
    return f"{low:,.0f}-{high:,.0f}"


def retention(data: dict[str, Any], table: Table) -> str:
    """Per database and run: produced and delivered rates, p99 lag, rows and bytes, catch-up."""
    rows = []
    for kind in ("postgresql", "mariadb"):
        for name, label in RUNS:
            r = data.get(kind, {}).get(name)
            if r is None:
                continue
            rows.append(
                (
                    kind,
                    label,
                    _n(r["produced_rate"]),
                    _n(r["rate"]),
                    _n(r["p99_ms"], " ms"),
                    f"{_x(r.get('rate_vs_without'))} / {_x(r.get('p99_vs_without'))}",
                    _range(r.get("rows_steady")),
                    _range(r.get("bytes_steady"), 2**20),
                    f"{_n(r['rows_max'])} / {r['bytes_max'] / 2**20:,.0f}",
                    "-" if r.get("caught_up_s") is None else f"{r['caught_up_s']:.0f} s",
                )
            )
    header = (
        "database",
        "run",
        "produced ev/s",
        "delivered ev/s (median)",
        "commit-to-sent p99",
        "rate / p99 vs without",
        "rows, steady state (min-max)",
        "MiB, steady state (min-max)",
        "rows / MiB at most",
        "backlog purged after",
    )
    return table(header, rows).rstrip("\n") + "\n" + _provenance(data)


def _provenance(data: dict[str, Any]) -> str:
    """Rows that came from another run than the section's (``data["runs"]``): keyed by a
    database kind (all its rows) or ``kind/run`` (that row alone, ``run`` a name of RUNS)."""
    labels = dict(RUNS)
    runs = data.get("runs", {})
    singled = {key.partition("/")[0] for key in runs if "/" in key}
    lines = []
    for key, r in sorted(runs.items()):
        kind, _, name = key.partition("/")
        if name:
            what = f'{kind}\'s row "{labels[name]}"'
        else:
            what = f"{kind}'s other rows" if kind in singled else f"{kind}'s rows"
        where = f"at commit `{r['commit']}`, with `{r['command']}`"
        lines.append(f"{what}: run {r['finished_at']} {where}.")
    # A paragraph of its own: a line right under a table would be read as one more row.
    return "".join(f"\n{line}\n" for line in lines)
