"""``python -m bench.levers [--rows N] [--reps N] [--batch N]``: what the incident levers cost
the claim (issue 47), on PostgreSQL, no broker.

Timed in one process, same database, alternating per repetition: ``DispatchStore.claim`` then
``DispatchStore.complete`` until ``--rows`` fresh pending rows are drained, batch ``--batch``,

- with no pause, and with 100 pauses in force (90 event-type names and 10 globs, none matching
  the drained rows, so both drains move the same rows and only the claim's conditions differ);
- with no rate limit, and with the drained type limited at a rate it never reaches
  (``RELAY_RATE_LIMITS="bench.*=1000000/s"``): the cost of the bucket row's lock, refill and
  payment in every claim of a limited type, beside the main claim that leaves the type out;
- with one pause whose type has ``--held`` rows waiting ahead of the drained ones (older ids):
  an incident's backlog, which the claims step over only once every few seconds
  (``relay.store.dispatch_path.floors``), against the same drain with no row held, and the
  same held drain with the floors turned off (every claim reads from the start: the code
  before them).

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
from relay.store.dispatch_path.floors import SETTLE_SECONDS, Floors
from relay.store.dispatch_path.holds import Hold
from relay.store.dispatch_path.store import DispatchStore
from relay.store.engine import create_engine
from relay.store.operations.pausing import PauseStore

#: Pauses in force in the "100 pauses" drains: names, then globs; none matches bench rows.
PAUSES = [("event_type", f"paused.type.{n}") for n in range(90)] + [
    ("event_type", f"paused.glob{n}.*") for n in range(10)
]
#: The paused type whose backlog waits ahead of the drained rows in the "held ahead" drains.
HELD_TYPE = "held.backlog"
#: mode: (100 pauses, rate limits, rows of a paused type waiting ahead, floors on).
MODES: dict[str, tuple[bool, tuple[RateLimit, ...], bool, bool]] = {
    "no lever": (False, (), False, True),
    "100 pauses": (True, (), False, True),
    "rate limit 1e6/s": (False, (RateLimit(rows.EVENT_TYPE, 1_000_000.0),), False, True),
    "held rows ahead": (False, (), True, True),
    "held ahead, no floor": (False, (), True, False),
}


class NoFloors(Floors):
    """Every claim reads the pending rows from the start (as before floors)."""

    def floor(self, hold: Hold, now: float) -> int | None:
        return None


def drain_rate(
    url: str,
    paused: bool,
    limits: tuple[RateLimit, ...],
    count: int,
    batch: int,
    held: int = 0,
    floors: bool = True,
) -> float:
    """Rows per second of claim + complete over ``count`` fresh pending rows (behind ``held``
    rows of a paused type)."""
    engine = create_engine(url, connect_args={"options": "-c synchronous_commit=off"})
    store = DispatchStore(engine, rate_limits=limits)
    if not floors:
        store.levers.floors = NoFloors()
    pauses = PauseStore(store.engine)
    try:
        with store.engine.begin() as conn:
            conn.execute(sa.text("TRUNCATE outbox, relay_pauses, relay_rate_buckets"))
        for kind, value in PAUSES if paused else ():
            pauses.pause(kind, value)
        if held:
            pauses.pause("event_type", HELD_TYPE)
            rows.insert_pending(store.engine, held)
            with store.engine.begin() as conn:
                conn.execute(sa.text(f"UPDATE outbox SET event_type = '{HELD_TYPE}'"))
        rows.insert_pending(store.engine, count)
        with store.engine.begin() as conn:
            conn.execute(sa.text("ANALYZE outbox"))
        # Untimed, in every mode alike: one batch, then as long as a claim's lesson takes to
        # settle (floors.py), so that the timed drain is the steady state of a long incident,
        # not a relay's first seconds under a new pause (which read from the start).
        moved = store.complete("bench", sent=store.claim("bench", batch, 30.0)).sent
        time.sleep(SETTLE_SECONDS)
        start, timed = time.perf_counter(), count - moved
        while events := store.claim("bench", batch, 30.0):
            moved += store.complete("bench", sent=events).sent
        rate = timed / (time.perf_counter() - start)
        assert moved == count, f"moved {moved} of {count}"
        assert pauses.held_rows(held + 1) == held, "a held row moved"
        return rate
    finally:
        store.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--held", type=int, default=100_000)
    args = parser.parse_args()
    print(f"load average before: {services.loadavg()}")
    with services.database("levers") as url:
        rates: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(args.reps):
            for mode, (paused, limits, ahead, floors) in MODES.items():
                held = args.held if ahead else 0
                rate = drain_rate(url, paused, limits, args.rows, args.batch, held, floors)
                rates[mode].append(rate)
        medians = {mode: statistics.median(r) for mode, r in rates.items()}
        for mode, r in rates.items():
            spread = (max(r) - min(r)) / 2 / medians[mode] * 100
            ratio = medians[mode] / medians["no lever"]
            shown = f"{medians[mode]:>8,.0f} rows/s (±{spread:.0f}%)"
            print(f"batch {args.batch} {mode:<20} {shown} {ratio:.2f}x")
    print(f"load average after: {services.loadavg()}")


if __name__ == "__main__":
    main()
