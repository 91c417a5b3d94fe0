"""``python -m bench.levers [--rows N] [--reps N] [--batch N]``: what the incident levers cost
the claim (issue 47), on PostgreSQL, no broker.

Timed in one process, same database, alternating per repetition: ``DispatchStore.claim`` then
``DispatchStore.complete`` until ``--rows`` fresh pending rows are drained, batch ``--batch``,

- with no pause, and with 100 pauses in force (90 event-type names and 10 globs, none matching
  the drained rows, so both drains move the same rows and only the claim's conditions differ);
- with no rate limit, and with the drained type limited at a rate it never reaches
  (``RELAY_RATE_LIMITS="bench.*=1000000/s"``): the cost of the bucket row's lock, refill and
  payment in every claim of a limited type, beside the main claim that leaves the type out.

The sessions commit with ``synchronous_commit=off`` so that the WAL flush of a machine shared
with other work does not drown the statements' own cost.
"""

from __future__ import annotations

import argparse
import statistics
import time

import sqlalchemy as sa

from bench import rows, services
from relay.config.rate_limits import RateLimit
from relay.store.dispatch_path.store import DispatchStore
from relay.store.engine import create_engine
from relay.store.operations.pausing import PauseStore

#: Pauses in force in the "100 pauses" drains: names, then globs; none matches bench rows.
PAUSES = [("event_type", f"paused.type.{n}") for n in range(90)] + [
    ("event_type", f"paused.glob{n}.*") for n in range(10)
]
MODES: dict[str, tuple[bool, tuple[RateLimit, ...]]] = {
    "no lever": (False, ()),
    "100 pauses": (True, ()),
    "rate limit 1e6/s": (False, (RateLimit(rows.EVENT_TYPE, 1_000_000.0),)),
}


def drain_rate(
    url: str, paused: bool, limits: tuple[RateLimit, ...], count: int, batch: int
) -> float:
    """Rows per second of claim + complete over ``count`` fresh pending rows."""
    engine = create_engine(url, connect_args={"options": "-c synchronous_commit=off"})
    store = DispatchStore(engine, rate_limits=limits)
    pauses = PauseStore(store.engine)
    try:
        with store.engine.begin() as conn:
            conn.execute(sa.text("TRUNCATE outbox, relay_pauses, relay_rate_buckets"))
        for kind, value in PAUSES if paused else ():
            pauses.pause(kind, value)
        rows.insert_pending(store.engine, count)
        with store.engine.begin() as conn:
            conn.execute(sa.text("ANALYZE outbox"))
        start, moved = time.perf_counter(), 0
        while events := store.claim("bench", batch, 30.0):
            moved += store.complete("bench", sent=events).sent
        assert moved == count, f"moved {moved} of {count}"
        return count / (time.perf_counter() - start)
    finally:
        store.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    print(f"load average before: {services.loadavg()}")
    with services.database("levers") as url:
        rates: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(args.reps):
            for mode, (paused, limits) in MODES.items():
                rates[mode].append(drain_rate(url, paused, limits, args.rows, args.batch))
        medians = {mode: statistics.median(r) for mode, r in rates.items()}
        for mode, r in rates.items():
            spread = (max(r) - min(r)) / 2 / medians[mode] * 100
            ratio = medians[mode] / medians["no lever"]
            rate = f"{medians[mode]:>8,.0f} rows/s (±{spread:.0f}%)"
            print(f"batch {args.batch} {mode:<18} {rate} {ratio:.2f}x")
    print(f"load average after: {services.loadavg()}")


if __name__ == "__main__":
    main()
