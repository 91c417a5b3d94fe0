"""``python -m bench.prepare [--rows N] [--reps N]``: what never preparing statements costs the
relay's claim + mark-sent path on a direct PostgreSQL connection (issue 28).

The relay's engines run with psycopg's ``prepare_threshold=None`` so that they work behind a
pooler in transaction mode; psycopg's default (5) prepares a statement on the server after its
fifth execution. Both are timed in one process, same database, alternating per repetition:
``DispatchStore.claim`` then ``DispatchStore.mark_sent`` until the table is drained, at batch 10 and
100. The sessions commit with ``synchronous_commit=off`` so that the WAL flush of a machine shared
with other work (tens of milliseconds here) does not drown what preparing saves: the statements'
own cost.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import sqlalchemy as sa

from bench import rows, services
from relay.store.dispatch_path.store import DispatchStore

#: psycopg's own default, which the relay's engines override.
PSYCOPG_DEFAULT_THRESHOLD = 5
MODES: dict[str, Any] = {"never": None, "psycopg default (5)": PSYCOPG_DEFAULT_THRESHOLD}


def drain_rate(url: str, threshold: int | None, count: int, batch: int) -> float:
    """Rows per second of claim + mark sent over ``count`` fresh pending rows."""
    store = DispatchStore.from_url(
        url,
        connect_args={"prepare_threshold": threshold, "options": "-c synchronous_commit=off"},
    )
    try:
        with store.engine.begin() as conn:
            conn.execute(sa.text("TRUNCATE outbox"))
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
    args = parser.parse_args()
    print(f"load average before: {services.loadavg()}")
    with services.database("prepare") as url:
        for batch in (10, 100):
            rates: dict[str, list[float]] = {mode: [] for mode in MODES}
            for _ in range(args.reps):
                for mode, threshold in MODES.items():
                    rates[mode].append(drain_rate(url, threshold, args.rows, batch))
            medians = {mode: statistics.median(r) for mode, r in rates.items()}
            for mode, r in rates.items():
                spread = (max(r) - min(r)) / 2 / medians[mode] * 100
                print(f"batch {batch:>3} {mode:<20} {medians[mode]:>8,.0f} rows/s (±{spread:.0f}%)")
            ratio = medians["never"] / medians["psycopg default (5)"]
            print(f"batch {batch:>3} never / default: {ratio:.2f}x")
    print(f"load average after: {services.loadavg()}")


if __name__ == "__main__":
    main()
