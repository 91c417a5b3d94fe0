"""The overview's charts as plain numbers for an inline SVG template: no script, nothing fetched."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

WIDTH, HEIGHT, MINUTES = 600, 140, 60


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    #: The tooltip: minute and value.
    title: str


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    unit: str
    peak: float
    bars: list[Bar]
    width: int = WIDTH
    height: int = HEIGHT


def per_minute(
    rows: Sequence[dict[str, Any]], field: str, title: str, unit: str, fmt: str = "{:,.0f}"
) -> Chart:
    """Bars of ``field`` per minute of the last hour, oldest on the left."""
    by_minute = {int(r["minutes_ago"]): float(r[field]) for r in rows}
    peak = max(by_minute.values(), default=0.0)
    step = WIDTH / MINUTES
    bars = []
    for ago in range(MINUTES - 1, -1, -1):
        value = by_minute.get(ago, 0.0)
        h = 0.0 if peak <= 0 else (HEIGHT - 4) * value / peak
        x = (MINUTES - 1 - ago) * step
        label = f"{ago} min ago: {fmt.format(value)} {unit}"
        bars.append(Bar(round(x, 1), round(HEIGHT - h, 1), round(step - 1, 1), round(h, 1), label))
    return Chart(title, unit, peak, bars)


__all__ = ["Bar", "Chart", "per_minute"]
