"""Latency bounds measured over a window, with one more window after a miss: on a shared machine
one stall decides the p99 of a short window, so a window over its bound is measured once more,
and only a relay slow in both fails."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def within_two(measure: Callable[[int], T], over: Callable[[T], bool]) -> tuple[T, int]:
    """``measure(n)`` for window n = 1, and once more (n = 2) when ``over`` its first result;
    the last result and how many windows were measured."""
    result = measure(1)
    if not over(result):
        return result, 1
    return measure(2), 2
