"""Markdown tables of the results: the headline ratios against the issue's targets, grids."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.stats import ratio


@dataclass(frozen=True)
class Target:
    """A headline target, written once: its value, its direction and its unit."""

    value: float
    above: bool = True
    unit: str = "x"

    def cells(self, measured: float) -> str:
        """The report's ``target | verdict`` cells for ``measured``."""
        text = f">= {self.value:g}{self.unit}" if self.above else f"< {self.value:g} {self.unit}"
        return f"{text} | {_ok(measured, self.value, self.above)}"


TARGETS = {
    "ceiling": Target(0.6),
    "naive": Target(5.0),
    "history": Target(0.9),
    "p99_ms": Target(250.0, above=False, unit="ms"),
}


def rate(r: dict[str, Any]) -> str:
    return f"{r['median']:,.0f} (±{r['spread'] * 50:.0f}%)" if r else "-"


def _best(grid: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    key = max(grid, key=lambda k: grid[k]["median"])
    return key, grid[key]


def _ok(value: float, target: float, above: bool = True) -> str:
    if value != value:  # NaN
        return "not measured"
    return "met" if (value >= target if above else value < target) else "**missed**"


def headline(res: dict[str, Any]) -> list[str]:
    ceil, naive = res.get("publish_ceiling", {}), res.get("naive", {})
    rabbit, hist = res.get("relay_rabbitmq", {}), res.get("history", {})
    out = ["| measure | value | target | verdict |", "| --- | --- | --- | --- |"]
    windowed = {k: v for k, v in ceil.items() if "window" in k}
    if rabbit and windowed:
        rk, rbest = _best(rabbit)
        ck, cbest = _best(windowed)
        r1 = ratio(rbest["median"], cbest["median"])
        out.append(
            f"| relay best ({rk}) / best windowed-confirm ceiling ({ck}) | {r1:.2f}x "
            f"({rbest['median']:,.0f} / {cbest['median']:,.0f} msg/s) | "
            f"{TARGETS['ceiling'].cells(r1)} |"
        )
        if "p1_b100" in rabbit and "kombu_confirm_window_100" in ceil:
            r = ratio(rabbit["p1_b100"]["median"], ceil["kombu_confirm_window_100"]["median"])
            out.append(
                f"| relay 1 process, batch 100 (the default) / confirm window 100 | "
                f"{r:.2f}x | {TARGETS['ceiling'].cells(r)} |"
            )
    if rabbit and naive:
        rk, rbest = _best(rabbit)
        nk, nbest = _best(naive)
        r2 = ratio(rbest["median"], nbest["median"])
        out.append(
            f"| relay best ({rk}) / naive best ({nk}) | {r2:.1f}x | {TARGETS['naive'].cells(r2)} |"
        )
        if "p1_b100" in rabbit and "p1" in naive:
            r = ratio(rabbit["p1_b100"]["median"], naive["p1"]["median"])
            out.append(
                f"| relay 1 process, batch 100 / naive 1 process | {r:.1f}x | "
                f"{TARGETS['naive'].cells(r)} |"
            )
    sizes = hist.get("sizes", {})
    if len(sizes) >= 2:
        lo, hi = min(sizes, key=int), max(sizes, key=int)
        for name, label in (("relay", "relay"), ("sql_only", "claim + mark, no broker")):
            r = ratio(sizes[hi][name]["median"], sizes[lo][name]["median"])
            out.append(
                f"| history: {label}, {int(hi):,} / {int(lo):,} sent rows | {r:.2f}x | "
                f"{TARGETS['history'].cells(r)} |"
            )
    wake = res.get("latency_wakeup", {})
    loads = wake.get("under_load", [])
    at_1000 = [r for r in loads if r["rate"] == 1000 and r["wakeup"]]
    p99_target = TARGETS["p99_ms"]
    if at_1000:
        p99 = at_1000[0]["p99_ms"]
        out.append(f"| p99 with wake-up at 1,000 ev/s | {p99:,.0f} ms | {p99_target.cells(p99)} |")
    else:
        out.append(f"| p99 with wake-up at 1,000 ev/s | - | {p99_target.cells(float('nan'))} |")
    return out


def grid_table(grid: dict[str, Any], unit: str = "rows/s") -> list[str]:
    procs = sorted({r["processes"] for r in grid.values()})
    batches = sorted({r["batch_size"] for r in grid.values()})
    out = [
        "| processes | " + " | ".join(f"batch {b}" for b in batches) + " |",
        "| --- |" + " --- |" * len(batches),
    ]
    for p in procs:
        cells = [rate(grid.get(f"p{p}_b{b}", {})) for b in batches]
        out.append(f"| {p} | " + " | ".join(cells) + " |")
    warnings = [f"{k}: {r['warning']}" for k, r in grid.items() if "warning" in r]
    out += [""] + [f"> warning: {w}" for w in warnings] if warnings else []
    out.append(
        f"\n{unit}: median of {len(next(iter(grid.values()))['runs'])} runs "
        "(± half the min..max spread)."
    )
    return out


def section_meta(rec: dict[str, Any]) -> str:
    return (
        f"load average {rec['loadavg_before'][0]:.2f} before, "
        f"{rec['loadavg_after'][0]:.2f} after; {rec['seconds']:.0f} s"
    )
