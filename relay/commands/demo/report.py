"""The verdict of ``relay demo``: what was committed against what arrived, and how it is shown.

Pure bookkeeping and formatting; :mod:`relay.commands.demo.run` runs the producers, worker and
consumer.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO


@dataclass
class Ledger:
    """What the producers committed and what the consumer received, with monotonic times."""

    committed: dict[str, float] = field(default_factory=dict)
    rolled_back: set[str] = field(default_factory=set)
    transactions: Counter[str] = field(default_factory=Counter)
    received: list[tuple[str, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True, slots=True)
class Outcome:
    """The demo's verdict; ``phantoms`` arrived without a committed transaction behind them."""

    committed: int
    delivered: int
    duplicates: int
    lost: int
    phantoms: int
    elapsed_seconds: float
    latencies_ms: list[float]
    transactions_committed: int = 0
    transactions_rolled_back: int = 0
    events_rolled_back: int = 0

    @property
    def ok(self) -> bool:
        """Something was committed, and all of it arrived once, and nothing else did."""
        return self.committed > 0 and not (self.lost or self.duplicates or self.phantoms)


def judge(ledger: Ledger, elapsed: float) -> Outcome:
    """Compare what arrived with what was committed; latency is commit to first arrival."""
    with ledger.lock:
        counts = Counter(e for e, _ in ledger.received)
        first_seen: dict[str, float] = {}
        for event_id, at in ledger.received:
            first_seen.setdefault(event_id, at)
        committed = ledger.committed
        latencies = sorted(
            (first_seen[e] - t) * 1000 for e, t in committed.items() if e in first_seen
        )
        return Outcome(
            committed=len(committed),
            delivered=sum(1 for e in counts if e in committed),
            duplicates=sum(n - 1 for n in counts.values()),
            lost=sum(1 for e in committed if e not in counts),
            phantoms=sum(1 for e in counts if e not in committed),
            elapsed_seconds=elapsed,
            latencies_ms=latencies,
            transactions_committed=ledger.transactions["committed"],
            transactions_rolled_back=ledger.transactions["rolled back"],
            events_rolled_back=len(ledger.rolled_back),
        )


class Progress:
    """One self-rewriting line on a terminal; a line per quarter otherwise."""

    WIDTH = 30

    def __init__(self, total: int, err: TextIO) -> None:
        self.total, self.err = total, err
        self.tty = err.isatty()
        self._quarters = 0

    def show(self, committed: int, delivered: int) -> None:
        share = min(delivered / self.total, 1.0)
        if self.tty:
            bar = "#" * round(share * self.WIDTH)
            self.err.write(
                f"\r[{bar:<{self.WIDTH}}] {delivered:>7}/{self.total} delivered, "
                f"{committed:>7} committed"
            )
            self.err.flush()
        elif share * 4 >= self._quarters + 1:
            self._quarters = int(share * 4)
            self.err.write(f"relay demo: {delivered}/{self.total} delivered\n")

    def done(self) -> None:
        if self.tty:
            self.err.write("\n")


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def summarize(o: Outcome, route: str, out: TextIO) -> None:
    """Print the verdict: counts, throughput and commit-to-consumer latency."""
    lat = o.latencies_ms
    rate = o.delivered / o.elapsed_seconds if o.elapsed_seconds > 0 else 0.0
    lines = [
        f"relay demo: {route}",
        f"  business    {o.transactions_committed} transactions committed, "
        f"{o.transactions_rolled_back} rolled back with {o.events_rolled_back} events",
        f"  events      committed {o.committed}, delivered {o.delivered}, "
        f"duplicates {o.duplicates}, lost {o.lost}, from rolled-back transactions {o.phantoms}",
        f"  throughput  {rate:,.0f} events/s ({o.delivered} in {o.elapsed_seconds:.2f} s, "
        "first commit to last delivery)",
        f"  latency     p50 {percentile(lat, 0.5):.1f} ms, p99 {percentile(lat, 0.99):.1f} ms, "
        f"max {max(lat, default=float('nan')):.1f} ms (commit to consumer)",
        "OK: every committed event delivered exactly once, none from a rollback"
        if o.ok
        else "FAILED: events were lost, duplicated or leaked from a rollback",
    ]
    out.write("\n".join(lines) + "\n")
    out.flush()
