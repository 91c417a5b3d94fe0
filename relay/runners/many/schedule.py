"""Pure scheduling of many outbox databases in one relay process (``relay dispatch`` over
``RELAY_DATABASES``, :mod:`relay.runners.many.workers`): which database runs next, when an idle
one is looked at again, and which database gives up its connection when the budget is full.

No I/O, no clock lookups: times are passed in, so the decisions can be tested from tables.

Fairness is start-time fair queueing over the time each database's units of work took (a
deficit round-robin whose quantum is one short drain): among the databases that are due, the
one that has been served least runs first, and a database that was idle starts again level
with the least-served busy one, so a quiet spell banks no credit and a million-row backlog
counts against its own database only. A database runs on one worker at a time, so a noisy
one holds at most one worker while the others take the rest. A look that only polls (no
wake-up said rows came, its last unit left none) yields to the databases known to have rows:
when the workers are all busy, a poll that would likely find nothing does not take a turn
from a database whose rows are waiting.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from relay.exceptions import ConfigError
from relay.wakeup.polling import IdlePoll

if TYPE_CHECKING:
    from relay.config.databases import Fleet, Member

#: A watched database (PostgreSQL, whose server's statistics tell which databases took rows)
#: that claimed rows this recently is still looked at every :data:`WARM_POLL_SECONDS` at most:
#: the statistics reach the watcher at once only when the writer's last report is a second
#: old (else up to 10 s later), so a trickle of one event a second is caught by the poll.
#: The poll is a net that earns its cost: each of its looks that finds nothing the wake-ups
#: had not already sent for doubles its wait (up to :data:`COLD_POLL_SECONDS`), and one that
#: finds rows (the statistics came late) brings it back to :data:`WARM_POLL_SECONDS`. Where
#: the writers' statistics come promptly (sessions that end, or a second apart) the
#: wake-ups alone carry the trickle and the looks cost no connection.
WARM_SECONDS = 30.0
WARM_POLL_SECONDS = 0.5
#: Looks a second, in all, at the warm watched databases: each look costs a connection.
WARM_LOOKS_PER_SECOND = 50.0
#: A watched database idle longer is looked at this rarely: its first write after a quiet
#: spell reaches the statistics, and the watcher, at once; this is the net under a lost one
#: (PostgreSQL reports an idle session's statistics within 10 s).
COLD_POLL_SECONDS = 10.0


#: Idle looks a second, in all, at the databases nothing watches (MySQL, MariaDB, SQLite,
#: ``RELAY_NOTIFY=0``): each costs a connection, so their slowest poll grows with their number.
POLLED_LOOKS_PER_SECOND = 50.0


def polled_ceiling(idle_poll_seconds: float, polled: int) -> float:
    """The slowest poll of a database nothing watches, among ``polled`` such databases: its
    own ``idle_poll_seconds`` (one database's), or slower when there are many."""
    return max(idle_poll_seconds, polled / POLLED_LOOKS_PER_SECOND)


@dataclass(slots=True)
class Entry:
    """One database as the scheduler sees it."""

    name: str
    #: Where its connections count against the per-server budget (``host:port``).
    server: str
    poll: IdlePoll
    #: A wake-up watches its server (PostgreSQL): it cools to :data:`COLD_POLL_SECONDS`.
    watched: bool = False
    #: When it should be looked at next (claim), on the caller's monotonic clock.
    due_at: float = 0.0
    #: Seconds of work it has been served (its virtual time).
    served: float = 0.0
    #: A worker is running a unit of work for it.
    running: bool = False
    #: It holds a connection (running, or parked for reuse since ``parked_at``).
    holding: bool = False
    parked_at: float = 0.0
    #: When a unit last claimed rows.
    busy_at: float = 0.0
    #: A wake-up came since its last unit started (rows were committed there).
    woken: bool = False
    #: The unit running now (or last) was started by a wake-up, not by a poll.
    by_wake: bool = False
    #: The warm poll's wait now (watched databases): doubled by each empty look.
    net: float = WARM_POLL_SECONDS
    #: Its next look is a poll, with no sign of rows: it yields to those known to have some.
    polling: bool = False


@dataclass(slots=True)
class Unit:
    """What one unit of work (a short drain) found, as the scheduler needs it."""

    #: Rows it claimed.
    claimed: int = 0
    #: A claim found nothing left: the database is drained for now.
    drained: bool = True
    #: Wait at least this long before the next unit (a broker or database outage backing off).
    rest: float = 0.0


@dataclass
class Schedule:
    """The many-databases scheduler: due times, fair order and the connection budget.

    ``slots`` connections in all, at most ``per_server`` on one server. A database holds one
    while a unit runs and may keep it afterwards (parked) while it has work, so a busy
    database does not reconnect for every unit; a parked connection is taken back, the least
    recently parked first, as soon as another database needs the slot.
    """

    slots: int
    per_server: int
    entries: dict[str, Entry] = field(default_factory=dict)

    @classmethod
    def for_fleet(cls, fleet: Fleet, now: float, *, watching: bool) -> Schedule:
        """``fleet``'s databases, each due at once, within its connection budget; with
        ``watching``, each watched PostgreSQL server's wake-up takes a connection of the budget
        and of its server's share. A budget the wake-ups use up is refused."""
        watches = len(fleet.watched) if watching else 0
        slots, per_server = _shares(fleet.budget, watches)
        if slots < 1 or (per_server < 1 and watches):
            raise ConfigError(
                f"RELAY_MAX_CONNECTIONS={fleet.budget[0]} leaves no connection to dispatch "
                f"with: the wake-up takes one per PostgreSQL server ({watches}); allow at "
                f"least {watches + 1}, or set RELAY_NOTIFY=0"
            )
        schedule = cls(slots, per_server)
        schedule.enlist(fleet, fleet.members, now, watching=watching)
        return schedule

    def refit(self, fleet: Fleet, added: Iterable[Member], now: float) -> None:
        """``fleet`` read again (a reload, its wake-ups watching): the budget's shares counted
        again (one connection at least, where :meth:`for_fleet` refused), ``added`` due at once."""
        slots, per_server = _shares(fleet.budget, len(fleet.watched))
        self.slots, self.per_server = max(1, slots), max(1, per_server)
        self.enlist(fleet, added, now, watching=True)

    def enlist(
        self, fleet: Fleet, members: Iterable[Member], now: float, *, watching: bool
    ) -> None:
        """:meth:`add` ``members`` of ``fleet``: a watched one (``watching``) polled up to its
        tick, the others up to :func:`polled_ceiling` among all those nothing watches."""
        watched = fleet.watched_names if watching else frozenset()
        polled = len(fleet.members) - len(watched)
        for m in members:
            s, w = m.settings, m.name in watched
            ceiling = s.tick_seconds if w else polled_ceiling(s.idle_poll_seconds, polled)
            self.add(m.name, m.server, s.poll_floor_seconds, ceiling, now, watched=w)

    def add(
        self,
        name: str,
        server: str,
        floor: float,
        ceiling: float,
        now: float,
        *,
        watched: bool = False,
    ) -> None:
        """A database to serve, due at once (rows may have waited while the relay was down):
        polled from ``floor`` up to ``ceiling``, or, ``watched``, up to
        :data:`WARM_POLL_SECONDS` while warm and :data:`COLD_POLL_SECONDS` once cold."""
        if watched:
            ceiling = min(ceiling, WARM_POLL_SECONDS)
        poll = IdlePoll(min(floor, ceiling), ceiling)
        self.entries[name] = Entry(name, server, poll, watched=watched, due_at=now, busy_at=now)

    # -- what runs next ---------------------------------------------------------------------
    def ready(self, now: float) -> list[Entry]:
        """The databases due and not running: those known to have rows (woken, or left rows)
        before those only polled, each group least served first (ties: longest overdue)."""
        due = [t for t in self.entries.values() if not t.running and t.due_at <= now]
        return sorted(due, key=lambda t: (t.polling, t.served, t.due_at))

    def next_due(self) -> float | None:
        """The earliest due time of a database not running (None: every one is running)."""
        times = [t.due_at for t in self.entries.values() if not t.running]
        return min(times, default=None)

    def wake(self, names: Iterable[str], now: float) -> None:
        """Rows were committed there (a wake-up): due at once, polling from the floor again;
        one running now is due again as soon as its unit ends (its claim may have come before
        the commit)."""
        for name in names:
            t = self.entries.get(name)
            if t is not None:
                t.poll.reset()
                t.woken = True
                t.polling = False
                t.due_at = min(t.due_at, now)

    def wake_all(self, now: float) -> None:
        """The wake-up lost sight of its server: every database there may have rows."""
        self.wake(list(self.entries), now)

    # -- the connection budget --------------------------------------------------------------
    def in_use(self, server: str | None = None) -> int:
        """Connections held (running or parked), on ``server`` or in all."""
        return sum(1 for t in self.entries.values() if t.holding and server in (None, t.server))

    def evictable(self, entry: Entry) -> Entry | bool | None:
        """Whether ``entry`` may start a unit: True when it holds its connection already or a
        slot is free, a parked database to take the slot from (close its connection first),
        or None to wait for a running one to finish."""
        if entry.holding:
            return True
        full_total = self.in_use() >= self.slots
        full_server = self.in_use(entry.server) >= self.per_server
        if not (full_total or full_server):
            return True
        parked = [
            t
            for t in self.entries.values()
            if t.holding and not t.running and (not full_server or t.server == entry.server)
        ]
        return min(parked, key=lambda t: t.parked_at, default=None)

    def hand_out(
        self, now: float, workers: int
    ) -> tuple[list[tuple[Entry, Entry | None]], float | None]:
        """Start units for the databases due, in :meth:`ready`'s order, on at most ``workers``
        idle workers and within the budget: each with the parked database whose slot it takes
        (close that one's connection first), or None; and the :meth:`next_due` time after."""
        handed: list[tuple[Entry, Entry | None]] = []
        for entry in self.ready(now):
            if len(handed) >= workers:
                break
            slot = self.evictable(entry)
            if slot is None:
                continue  # waiting for a connection
            evicted = slot if isinstance(slot, Entry) else None
            if evicted is not None:
                self.release(evicted)
            self.start(entry)
            handed.append((entry, evicted))
        return handed, self.next_due()

    def start(self, entry: Entry) -> None:
        """A worker runs a unit for ``entry``, on a connection it holds; a database back from
        a quiet spell starts level with the least-served running one (it banked no credit)."""
        level = min((t.served for t in self.entries.values() if t.running), default=None)
        if level is not None:
            entry.served = max(entry.served, level)
        entry.running = entry.holding = True
        entry.by_wake, entry.woken = entry.woken, False

    def release(self, entry: Entry) -> None:
        """``entry``'s connection was closed (idle, evicted, or lost)."""
        entry.holding = False

    # -- after a unit -----------------------------------------------------------------------
    def finish(self, entry: Entry, unit: Unit, started: float, now: float) -> bool:
        """Charge ``entry`` for the unit it ran from ``started`` to ``now`` and set when it is
        due again; returns whether it keeps its connection (it has work left); when not, its
        slot is free from now on (close the connection)."""
        keep = self._finish(entry, unit, started, now)
        if not keep:
            self.release(entry)
        return keep

    def _finish(self, entry: Entry, unit: Unit, started: float, now: float) -> bool:
        entry.running = False
        entry.served += max(0.0, now - started)
        if unit.claimed:
            entry.busy_at = now
        entry.polling = False
        if unit.rest > 0:
            entry.due_at = now + unit.rest
            return False
        if not unit.drained:  # more rows: due at once, behind whoever is served less
            entry.due_at = now
            entry.parked_at = now
            return True
        if entry.woken:  # rows committed while it ran: look again at once
            entry.due_at = now
            return False
        if entry.watched:
            # Drained: new rows will wake it; the look is the net under a late report.
            if not entry.by_wake:
                entry.net = (
                    WARM_POLL_SECONDS if unit.claimed else min(COLD_POLL_SECONDS, entry.net * 2)
                )
            entry.due_at = now + self.watched_poll(entry, now)
            entry.polling = True
            return False
        if unit.claimed:
            entry.poll.reset()
        entry.due_at = now + entry.poll.next()
        entry.polling = True
        if unit.claimed:  # polled: it looks again after the floor, on the same connection
            entry.parked_at = now
            return True
        return False

    def watched_poll(self, entry: Entry, now: float) -> float:
        """How soon a drained watched database is looked at again: after its net's wait
        (from :data:`WARM_POLL_SECONDS`, doubled by each empty look) while it had rows
        lately, but the warm databases together at most :data:`WARM_LOOKS_PER_SECOND` times
        a second; :data:`COLD_POLL_SECONDS` once quiet."""
        if now - entry.busy_at >= WARM_SECONDS:
            return COLD_POLL_SECONDS
        warm = sum(1 for t in self.entries.values() if t.watched and now - t.busy_at < WARM_SECONDS)
        return max(entry.net, warm / WARM_LOOKS_PER_SECOND)

    def failed(self, entry: Entry, rest: float, now: float) -> None:
        """The unit failed (the database unreachable): due again after ``rest``, no
        connection kept (close it)."""
        entry.running = False
        entry.polling = False
        entry.due_at = now + rest
        self.release(entry)

    def waiting(self, now: float) -> int:
        """Databases due but not running: waiting for a worker or a connection."""
        return len(self.ready(now))


def _shares(budget: tuple[int, int], watches: int) -> tuple[int, int]:
    """The connections left to relay with, in all and to one server, when ``watches``
    wake-ups (one per watched server) take theirs out of ``budget`` (in all, to one server)."""
    total, per_server = budget
    return total - watches, per_server - (1 if watches else 0)


__all__ = [
    "COLD_POLL_SECONDS",
    "WARM_LOOKS_PER_SECOND",
    "WARM_POLL_SECONDS",
    "WARM_SECONDS",
    "Entry",
    "Schedule",
    "Unit",
]
