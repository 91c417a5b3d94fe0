"""Pure: how the retention purge paces its batches and yields to delivery."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PurgePacing:
    """How the retention purge paces itself: each transaction deletes a batch sized so that it
    lasts about ``target_seconds`` (short: a claim or a producer waiting on one of its row or
    index locks waits at most that long), and the purger rests between batches so that it
    works ``duty`` of its time, leaving the rest of the database to the relay and producers.

    A purger deletes ``duty`` times the rate at which its batches run: at least
    ``max_batch / target_seconds * duty`` rows a second (50,000 at the defaults) whenever a
    batch of ``max_batch`` rows takes under ``target_seconds``, more when batches are quicker
    (80,000 measured on PostgreSQL, docs/benchmarks.md), several times the relay's own rate on
    2 cores: it catches up with a backlog instead of carrying it from one run to the next.
    Batches never shrink below ``min_batch``: on a loaded machine a batch is slow whatever its
    size, and smaller ones would only slow the purge down (deleting sent rows takes no lock a
    claim or a producer waits for on PostgreSQL; on MariaDB their gap locks cover only the
    oldest sent rows).

    **Delivery first.** A purge shares the database's CPU and disk with the relays it purges
    for. After each batch the purger reads how late delivery is (the age of the oldest due
    pending row) and hands the result to :meth:`next_duty`: above ``yield_lag_seconds`` its duty
    halves, down to ``min_duty``; at or below, it doubles back up to ``duty``. On MariaDB, where
    each deleted row leaves every index (no partial indexes), a 10,000,000-row catch-up at half
    duty beside 3,000 events a second put delivery 108 s behind within 9 minutes on 2 cores
    (docs/benchmarks.md, section 16); yielding keeps delivery within about the threshold while
    the purge goes on at ``min_duty`` or more, so a backlog is still purged in bounded time."""

    #: How long one delete transaction should take: batches grow or shrink towards it.
    target_seconds: float = 0.1
    #: The share of its time the purge works while delivery keeps up (rests fill the rest).
    duty: float = 0.5
    #: The first batch's rows, and the bounds a batch stays within.
    first_batch: int = 1000
    min_batch: int = 1000
    max_batch: int = 10_000
    #: Delivery this late (seconds) makes the purge yield.
    yield_lag_seconds: float = 0.5
    #: The least share of its time the purge works, however late delivery is.
    min_duty: float = 0.05

    def next_batch(self, size: int, elapsed: float) -> int:
        """The next batch's size after one of ``size`` rows took ``elapsed`` seconds: scaled
        toward the target, by at most a factor of two either way, within the bounds."""
        ratio = 2.0 if elapsed <= 0 else max(0.5, min(2.0, self.target_seconds / elapsed))
        return max(self.min_batch, min(self.max_batch, int(size * ratio)))

    def next_duty(self, duty: float, lag: float | None) -> float:
        """The duty after a batch, from the previous one and delivery's ``lag`` (seconds; None:
        nothing pending): halved while delivery is later than ``yield_lag_seconds``, else
        doubled, within ``min_duty`` and ``duty``."""
        if lag is not None and lag > self.yield_lag_seconds:
            return max(self.min_duty, duty / 2)
        return min(self.duty, duty * 2)

    def pause(self, elapsed: float, duty: float | None = None) -> float:
        """Seconds to rest after a batch that took ``elapsed``, to keep to the duty cycle
        (``duty``, or the policy's own)."""
        share = self.duty if duty is None else duty
        return max(0.0, elapsed) * (1.0 - share) / share
