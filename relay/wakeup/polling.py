"""Pure: when an idle relay looks again (the adaptive poll's waits) and the PostgreSQL
wake-up's rule of when a look at the outbox id sequence calls for a claim. Readings are passed
in; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


class IdlePoll:
    """The adaptive poll's waits: ``floor`` after activity, doubling to ``ceiling`` while the
    outbox stays empty. Idle, a process claims ``1 / ceiling`` times a second; after a burst,
    about ``log2(ceiling / floor)`` more claims until it is back at the ceiling.

    ``hold`` keeps the floor for that many more looks after activity before doubling: a watcher
    whose empty looks may only mean that someone else drained the rows (beat's poller, while
    workers drain) stays quick while rows keep coming, at ``hold`` extra looks per burst."""

    def __init__(self, floor: float, ceiling: float, hold: int = 0) -> None:
        self.floor, self.ceiling, self.hold = floor, ceiling, hold
        self._next = ceiling
        self._held = hold

    def reset(self) -> None:
        self._next, self._held = self.floor, 0

    def next(self) -> float:
        wait = self._next
        if self._held < self.hold:
            self._held += 1
        else:
            self._next = min(self.ceiling, wait * 2)
        return wait


@dataclass(slots=True)
class SequenceWatch:
    """The PostgreSQL wake-up's rule (``relay.wakeup.watcher``): a writer pays nothing for it,
    the relay looks at the outbox's id sequence and at the server's oldest running transaction,
    and looks for claimable rows only when a writer may have committed some.

    Every ``INSERT`` that takes an id moves the sequence (``last_value``) before its transaction
    commits. Each look reads ``last_value`` and ``xmin``, the oldest transaction still running:

    - the value moved: look for rows now, and hold a horizon: a transaction id taken just after
      the look (:attr:`wants_horizon`, then :meth:`hold`), so every writer seen moving the
      sequence has an older one; raised once more at the next look, for a writer that took its
      id just before its transaction id;
    - behind the horizon (``xmin < horizon``: a writer seen may still be open): look for rows
      at every look, since its commit moves nothing;
    - ``xmin`` passed the horizon: every writer seen has ended; look once more, then rest.

    (A snapshot's ``xmax`` cannot be the horizon: it is one past the newest transaction that
    *ended*, so a writer still running with a newer id is in no snapshot's list.)
    A transaction that holds ``xmin`` back for long (a report, a session idle in transaction)
    keeps the looks for rows going while it lasts. The first look (and the first after a
    reconnect) is a look for rows, with a horizon for the writers already running.
    """

    #: ``last_value`` at the previous look (None: the sequence was never used).
    value: int | None = None
    #: Transactions below this id may be writers the relay has not seen end.
    horizon: int | None = None
    #: Set by a look after which the watcher takes a new transaction id for :meth:`hold`.
    wants_horizon: bool = False
    _seen: bool = False
    _raise: bool = False

    def reset(self) -> None:
        """Forget what was seen (a new connection): the next look starts afresh."""
        self.value, self.horizon, self.wants_horizon = None, None, False
        self._seen = self._raise = False

    def observe(self, value: int | None, xmin: int) -> bool:
        """One look: the sequence's ``last_value`` (None: never used) and the snapshot's
        ``xmin``. True: look for claimable rows now (and wake the relay if there are)."""
        if not self._seen or value != self.value:
            self._seen, self.value = True, value
            self.wants_horizon = self._raise = True
            return True
        if self._raise:
            self._raise, self.wants_horizon = False, True
            return True
        self.wants_horizon = False
        if self.horizon is None:
            return False
        if xmin >= self.horizon:
            self.horizon = None
        return True

    def hold(self, xid: int) -> None:
        """The transaction id taken after a look that :attr:`wants_horizon`."""
        self.horizon = xid if self.horizon is None else max(self.horizon, xid)
        self.wants_horizon = False


@dataclass(slots=True)
class WatchPace:
    """When the PostgreSQL wake-up looks next (``relay.wakeup.watcher``): ``floor`` after a
    look that saw the sequence move (or looked for rows) and for ``hold`` seconds after it,
    then doubling after each look that saw nothing up to ``ceiling`` while the relay is idle.
    Times are readings of one monotonic clock, passed in.

    A claim the relay makes anyway (its safety-net tick) looks at the rows too: it is
    :meth:`covered`, and the next look comes ``wait`` after the later of the last look and the
    last claim. When claims come every ``period`` seconds (the tick), a look due within
    ``slack`` of the next claim (either side) is left to it, so an idle relay's safety-net
    claim takes one of its looks' places instead of adding a transaction to them. A commit
    therefore waits at most about ``ceiling`` for the look or claim that finds it (``slack``
    more when that claim comes late, one ``ceiling`` more when it does not come at all).
    """

    floor: float
    ceiling: float
    #: The interval of the claims that cover looks (None: none are expected).
    period: float | None = None
    slack: float = 0.02
    #: Seconds the looks stay at the floor after the last active one before backing off, so
    #: that events a moment apart (a trickle, a load after a short pause) are not each met by
    #: a backed-off look.
    hold: float = 0.0
    wait: float = 0.0
    last_look: float | None = None
    last_cover: float | None = None
    last_active: float | None = None

    def looked(self, at: float, *, active: bool) -> None:
        """A look at ``at``; ``active``: it saw the sequence move or looked for rows."""
        self.last_look = at
        if active:
            self.last_active = at
        held = self.last_active is not None and at - self.last_active < self.hold
        if active or held:
            self.wait = self.floor
        else:
            self.wait = min(self.ceiling, max(self.floor, self.wait * 2))

    def covered(self, at: float) -> None:
        """A claim started at ``at``: it sees every row committed before it."""
        self.last_cover = at if self.last_cover is None else max(self.last_cover, at)

    def due(self) -> float:
        """When the next look is due (the first look: at once)."""
        if self.last_look is None:
            return -math.inf
        last = self.last_look if self.last_cover is None else max(self.last_look, self.last_cover)
        due = last + self.wait
        if self.period is not None and self.last_cover is not None:
            claim = self.last_cover + self.period
            if abs(claim - due) <= self.slack:
                return claim + self.wait
        return due
