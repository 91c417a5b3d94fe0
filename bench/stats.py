"""Medians and spreads of repeated measurements."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any


def summarize(values: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and relative spread ((max - min) / median) of ``values``."""
    med = statistics.median(values)
    lo, hi = min(values), max(values)
    return {
        "median": med,
        "min": lo,
        "max": hi,
        "spread": (hi - lo) / med if med else 0.0,
        "runs": list(values),
    }


def repeat(reps: int, measure: Callable[[], float]) -> dict[str, Any]:
    """Run ``measure`` ``reps`` times and summarize the rates it returns."""
    return summarize([measure() for _ in range(reps)])


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of already sorted values, nearest rank."""
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * len(sorted_values) + 0.5) - 1))
    return sorted_values[index]


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")
