"""Pure: when a claim also reads the lane of expired leases (a monotonic reading is passed in)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class LeaseSweep:
    """When a claim also reads the lane of expired leases: at most every ``every_seconds``
    (the first claim always does).

    The lane reads ``ix_outbox_leases`` from its oldest expiry up to now, and on PostgreSQL
    that range holds an entry for the old version of every row claimed since the table's last
    vacuum (a claimed row's lease ends in the past once it is sent; the entry goes only when
    vacuum removes it). Read by every claim, it cost each claim time in proportion to the rows
    relayed since the last vacuum (9 ms a claim after a minute at 3,000 events a second); read
    once a second, it costs that once a second, and an expired lease (a crashed worker's) is
    taken back at most about a second later than at once, against a lease of 30 s.
    """

    every_seconds: float
    _last: float | None = field(default=None, init=False)

    def due(self, now: float) -> bool:
        """Whether the claim made at ``now`` (a monotonic clock) reads the lane; it counts as
        the look when it does."""
        if self._last is not None and now - self._last < self.every_seconds:
            return False
        self._last = now
        return True
