"""Where a held claim starts reading the pending rows (:class:`Floors`); pure.

A claim reads the pending unordered rows through their index in id order. With a pause in
force the paused rows stay in that index, and an incident is exactly when they pile up: read
from the start, every claim of the other types would first step over all of them (100,000
paused rows made a claim of 100 others take 155 ms instead of 26). So a claim under a hold
starts at a floor instead, below which no row it may take is left.

What a claim took says where that floor is: at the moment it ran, nothing it could take lay
below the lowest id it took (or, when it took nothing at all, below the table's highest id).
A row can still become claimable below that later: its transaction got its id before the
claim and committed after, or its retry's backoff ran out. So the floor trails: a claim uses
what a claim at least :data:`SETTLE_SECONDS` earlier learned, which no transaction shorter
than that can fall below (ids grow with time); and every :data:`FULL_SCAN_SECONDS` a claim
reads from the start, taking whatever is left below (a longer transaction, a retry: they wait
up to that long more while a hold is in force). A claim with no hold never has a floor:
normal operation reads exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from relay.store.dispatch_path.holds import Hold

#: How long after a claim its lesson is used: a transaction shorter than this never commits
#: below the floor.
SETTLE_SECONDS = 2.0
#: How often a held claim reads the pending rows from the start (what fell below the floor
#: waits up to this long more).
FULL_SCAN_SECONDS = 5.0


@dataclass(slots=True)
class _Learned:
    #: When the last claim read from the start.
    scanned_at: float
    #: ``(when, floor)`` of the claims since, oldest first: what each one learned.
    lessons: list[tuple[float, int]] = field(default_factory=list)


class Floors:
    """The floor of each hold's claims, learned from what they took."""

    def __init__(self) -> None:
        self._by_hold: dict[Hold, _Learned] = {}

    def floor(self, hold: Hold, now: float) -> int | None:
        """Where a claim under ``hold`` at ``now`` starts; None: from the start (no hold, a
        full read due, or nothing learned :data:`SETTLE_SECONDS` ago yet)."""
        learned = self._by_hold.get(hold) if hold else None
        if learned is None or now - learned.scanned_at >= FULL_SCAN_SECONDS:
            return None
        settled = [i for i, (when, _) in enumerate(learned.lessons) if when <= now - SETTLE_SECONDS]
        if not settled:
            return None
        del learned.lessons[: settled[-1]]  # older lessons are never used again
        return learned.lessons[0][1]

    def learned(
        self,
        hold: Hold,
        started: int | None,
        taken: Iterable[tuple[int, bool]],
        top: Callable[[], int | None],
        now: float,
    ) -> None:
        """After a claim under ``hold`` that started at ``started`` (None: from the start) and
        took the rows ``taken`` (``(id, ordered)``): its lesson is the lowest unordered id it
        took; when it took no row at all, one past the table's highest id (``top``, asked only
        then); when it took keyed rows only, none (its unordered lane may not have run)."""
        if not hold:
            return
        learned = self._by_hold.get(hold)
        if started is None or learned is None:
            learned = self._by_hold.setdefault(hold, _Learned(now))
            learned.scanned_at = now
        rows = list(taken)
        unordered = [row_id for row_id, ordered in rows if not ordered]
        if unordered:
            learned.lessons.append((now, min(unordered)))
        elif not rows:
            highest = top()
            learned.lessons.append((now, 0 if highest is None else highest + 1))


__all__ = ["FULL_SCAN_SECONDS", "SETTLE_SECONDS", "Floors"]
