"""The Celery fleet over several outbox databases (``RELAY_DATABASES``): one
:class:`~relay.dispatch.runtime.Runtime` per database in each worker process (each on one
connection, given back after each task), and the tick that shares the fan-out between them.

A fleet tick does no claim of its own: it counts the claimable rows of the databases that may
have some (a bounded count, the databases asked in parallel so one that is down costs only its
own timeout) and sends ``claim_and_dispatch(source=NAME)`` tasks as
:func:`relay.celery.many_databases.share_fanout` deals them: every database with work gets one
before any gets a second, ``RELAY_MAX_FANOUT`` in all. A database's drain in such a fleet stops
after one tick (:func:`drain_budget`), so a worker process held by the busy database is free again
for the next tick's tasks, which reach the queue interleaved.

Which databases a tick counts (:class:`CountPlan`): on PostgreSQL, one statement per *server*
reads how many rows each database has written (inserted, updated, deleted: new events, claims,
outcomes), and only those whose figure moved since this process last looked are counted, plus
each database every :data:`COUNT_NET_SECONDS` (rows that become due with no write: a retry's
backoff ending, a lease expiring); the other databases are counted every tick. So an idle
PostgreSQL database costs no connection between its nets, where it cost one every tick.

``RELAY_DATABASES=@PATH``: each worker process looks at the file (one ``stat``) before its
tasks, at most every :data:`RELOAD_CHECK_SECONDS`, and when it changed brings its databases in
line with it (:meth:`Runtimes.refresh`): added ones are counted by the next tick, dropped ones
let go. No restart; a Celery worker's SIGHUP restarts it, so the file is the signal here.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from relay.celery.names import TICK
from relay.config import database_list
from relay.config.databases import Fleet, Member
from relay.dispatch.runtime import Runtime
from relay.exceptions import ConfigError, RelayError

log = logging.getLogger(__name__)

#: A database whose written-rows figure did not move is still counted this often by each
#: worker process's ticks (and its tick heartbeat written then, for ``relay doctor``).
COUNT_NET_SECONDS = 10.0
#: A tick counts at most this many databases at once (``RELAY_MAX_CONNECTIONS`` if lower):
#: a count is one short statement, so more at once would only add connections.
COUNTS_AT_ONCE = 10
#: A worker process looks at a ``RELAY_DATABASES=@PATH`` file at most this often.
RELOAD_CHECK_SECONDS = 1.0


def share_fanout(
    backlogs: Mapping[str, int], batch_size: int, max_fanout: int, *, turn: int = 0
) -> tuple[str, ...]:
    """The ``claim_and_dispatch`` tasks one tick of a fleet over several databases sends, in
    the order to send them: one name per task, ``max_fanout`` at most in all.

    Each database wants one task per ``batch_size`` rows of its (bounded) ``backlogs`` count.
    Tasks are dealt in rounds, one per database still wanting more in each round (max-min
    fairness): every database with work gets its first task before any gets a second, so a
    million-row backlog takes only what the others leave. When more databases have work than
    ``max_fanout`` allows, ``turn`` (the tick's number) rotates which ones go first, so each is
    served within a few ticks. Sending in rounds interleaves the queue the same way.
    """
    if batch_size < 1 or max_fanout < 1:
        raise ValueError(f"batch_size and max_fanout must be >= 1, got {batch_size}, {max_fanout}")
    wanted = {name: math.ceil(rows / batch_size) for name, rows in backlogs.items() if rows > 0}
    order = list(wanted)
    if order:
        start = (turn * max_fanout) % len(order)
        order = order[start:] + order[:start]
    sends: list[str] = []
    round_ = 1
    while len(sends) < max_fanout:
        dealt = [name for name in order if wanted[name] >= round_]
        if not dealt:
            break
        sends.extend(dealt[: max_fanout - len(sends)])
        round_ += 1
    return tuple(sends)


@dataclass
class CountPlan:
    """Which databases one worker process's tick counts (pure: figures and times passed in).

    A database is counted when its written-rows figure is unknown (not PostgreSQL, or its
    server did not answer), moved since this process last saw it, when this process's last
    count of it found rows (a backlog the tick's tasks have not drained yet: counted every
    tick until one finds it empty), or when it was last counted :attr:`net` seconds ago or
    more. Ticks land on any worker process, each with its own plan: a process that looked
    longer ago sees more moves, so more counts, never fewer."""

    net: float = COUNT_NET_SECONDS
    seen: dict[str, int] = field(default_factory=dict)
    found: dict[str, int] = field(default_factory=dict)
    counted_at: dict[str, float] = field(default_factory=dict)

    def choose(self, names: Sequence[str], written: Mapping[str, int], now: float) -> list[str]:
        return [
            n
            for n in names
            if n not in written
            or self.seen.get(n) != written[n]
            or self.found.get(n, 0) > 0
            or now - self.counted_at.get(n, -math.inf) >= self.net
        ]

    def due_for_net(self, name: str, now: float) -> bool:
        """Whether this count is ``name``'s net (its heartbeat is written then)."""
        return now - self.counted_at.get(name, -math.inf) >= self.net

    def counted(self, counts: Mapping[str, int], written: Mapping[str, int], now: float) -> None:
        """What this tick's counts found (by database), beside the figures read before them."""
        for n, rows in counts.items():
            if self.due_for_net(n, now):
                self.counted_at[n] = now
            if n in written:
                self.seen[n] = written[n]
            self.found[n] = rows


class Runtimes:
    """Each configured database's :class:`Runtime` in this worker process, by name."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet, self.settings, self.several = fleet, fleet.settings, fleet.several
        self.by_name = {m.name: self.runtime(m) for m in fleet.members}
        self._turns = itertools.count()
        #: The tick's choice of databases to count, and its statistics readers (this process's).
        self.plan = CountPlan()
        self._stats: list[tuple[Any, dict[str, str]]] | None = None
        self._stats_pid = 0
        self._checked_at = time.monotonic()

    def runtime(self, member: Member) -> Runtime:
        """A database's runtime in this worker process: over several databases on one
        connection, given back after each task (docs/many-databases.md, "The connection
        budget"), so that a process holds none for a database it is not relaying."""
        return Runtime(member.name, member.settings, one_connection=self.several)

    def __iter__(self) -> Iterator[tuple[str, Runtime]]:
        return iter(self.by_name.items())

    def get(self, source: str | None) -> Runtime:
        """The named database's runtime; None: the only (or first) one. A name not known yet
        makes the list be looked at again first (another process saw it added)."""
        if source is None:
            return next(iter(self.by_name.values()))
        if source not in self.by_name:
            self.refresh(force=True)
        try:
            return self.by_name[source]
        except KeyError:
            raise LookupError(f"relay task for unknown database {source!r}") from None

    def refresh(self, *, force: bool = False, now: float | None = None) -> bool:
        """Bring this process's databases in line with ``RELAY_DATABASES=@PATH`` when the
        file changed (looked at most every :data:`RELOAD_CHECK_SECONDS` unless ``force``):
        added databases get a runtime, dropped ones (or whose URL changed) are closed. A list
        the checks refuse, or one that would turn a fleet of one database into several or
        back (its sources and connection use differ), changes nothing and is logged. Whether it
        changed anything."""
        now = time.monotonic() if now is None else now
        if not force and now - self._checked_at < RELOAD_CHECK_SECONDS:
            return False
        self._checked_at = now
        raw = self.settings.databases
        if not database_list.changed(raw):
            return False
        database_list.forget_files()
        try:
            fleet = Fleet.from_settings(self.settings)
            if not (self.several and fleet.several):
                raise ConfigError(
                    "a fleet started over one database, or a list down to one, is read again "
                    "only at a restart (its sources and connection use differ)"
                )
        except ConfigError as exc:
            log.error("relay reload refused, the %d databases stay: %s", len(self.by_name), exc)
            return False
        fresh = {m.name: m for m in fleet.members}
        gone = [
            name
            for name, rt in self.by_name.items()
            if name not in fresh or fresh[name].settings.database_url != rt.settings.database_url
        ]
        for name in gone:  # at a task's start: none of this process's drains runs
            self.by_name.pop(name).close()
        added = [name for name in fresh if name not in self.by_name]
        for name in added:
            self.by_name[name] = self.runtime(fresh[name])
        self.by_name = {name: self.by_name[name] for name in fresh}  # the file's order
        self.fleet, self._stats = fleet, None  # the statistics readers cover the new list
        log.info(
            "reloaded RELAY_DATABASES: %d databases; added %s; dropped %s",
            len(self.by_name),
            ", ".join(added) or "none",
            ", ".join(gone) or "none",
        )
        return bool(added or gone)

    def chosen(self, source: str | None) -> list[Runtime]:
        """What one ``claim_and_dispatch(source)`` drains: the named database, or with none
        named (a wake-up after an ``enqueue`` commit, which does not know its database) each
        database in turn."""
        if source is None and self.several:
            return list(self.by_name.values())
        return [self.get(source)]

    def turn(self) -> int:
        """This process's tick count, rotating who goes first when tasks are short."""
        return next(self._turns)

    def written(self) -> dict[str, int]:
        """Each PostgreSQL database's written-rows figure, one statement per server on a
        connection closed after it; a server that does not answer leaves its databases out
        (so they are counted)."""
        if self._stats is None or self._stats_pid != os.getpid():
            from relay.wakeup.serverwatch import stats_by_server

            self._stats, self._stats_pid = stats_by_server(self.fleet), os.getpid()
        found: dict[str, int] = {}
        for stats, names in self._stats:
            try:
                figures = stats.inserted()
            except RelayError as exc:
                log.debug("relay tick: statistics of a server unknown: %s", exc)
                continue
            finally:
                stats.close()
            found.update({names[d]: n for d, n in figures.items() if d in names})
        return found

    # Signal handlers: each database's runtime follows the worker's process life.
    def forget(self, *args: Any, **kwargs: Any) -> None:
        self._stats = None
        for rt in self.by_name.values():
            rt.forget(*args, **kwargs)

    def stop(self, *args: Any, **kwargs: Any) -> None:
        for rt in self.by_name.values():
            rt.stop(*args, **kwargs)

    def close(self, *args: Any, **kwargs: Any) -> None:
        for rt in self.by_name.values():
            rt.close(*args, **kwargs)


def drain_budget(runtimes: Runtimes) -> float | None:
    """A drain's budget: one tick when several databases share the workers (None: the
    lease-derived default of one database)."""
    if not runtimes.several:
        return None
    s = runtimes.settings
    return min(s.drain_budget_seconds, max(s.tick_seconds, 0.5))


def backlogs(
    runtimes: Runtimes,
    limit: int,
    timeout: float,
    names: Sequence[str] | None = None,
    heartbeat: Callable[[str], bool] = lambda _: True,
) -> dict[str, int]:
    """The claimable rows of each database in ``names`` (None: all), counted up to ``limit``,
    asked in parallel; a database that fails or does not answer within ``timeout`` counts as
    one row, so it still gets a task whose own claim reports (and retries) its outage. Where
    ``heartbeat(name)``, the count also writes the tick's heartbeat there."""
    found: dict[str, int] = {}
    chosen = list(runtimes.by_name) if names is None else list(names)
    if not chosen:
        return found
    # At most COUNTS_AT_ONCE (or RELAY_MAX_CONNECTIONS) at once, each given back after its count.
    most = min(len(chosen), runtimes.settings.max_connections, COUNTS_AT_ONCE)
    pool = ThreadPoolExecutor(max_workers=most, thread_name_prefix="relay-count")
    try:
        asked = {
            pool.submit(_beat_and_count, runtimes.by_name[name], limit, heartbeat(name)): name
            for name in chosen
        }
        done, _ = wait(asked, timeout=timeout)
        for future, name in asked.items():
            try:
                found[name] = future.result(timeout=0) if future in done else 1
            except Exception as exc:
                log.warning("relay tick: backlog of database %r unknown: %s", name, exc)
                found[name] = 1
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return found


def _beat_and_count(runtime: Runtime, limit: int, heartbeat: bool) -> int:
    with runtime.held():
        if heartbeat:  # `relay doctor --source NAME`: when beat last ticked
            runtime.operations().beat(TICK)
        return runtime.store().backlog(limit)


def fleet_tick(runtimes: Runtimes, send: Callable[[str], None]) -> dict[str, int]:
    """One tick of a fleet over several databases (with the settings they were read from):
    count, share, send; the tasks per name."""
    s = runtimes.settings
    now = time.monotonic()
    written = runtimes.written()
    names = runtimes.plan.choose(list(runtimes.by_name), written, now)
    counts = backlogs(
        runtimes,
        s.batch_size * s.max_fanout,
        timeout=max(0.2, s.tick_seconds / 2),
        names=names,
        heartbeat=lambda name: runtimes.plan.due_for_net(name, now),
    )
    runtimes.plan.counted(counts, written, now)
    sends = share_fanout(counts, s.batch_size, s.max_fanout, turn=runtimes.turn())
    for name in sends:
        send(name)
    return {name: sends.count(name) for name in counts}
