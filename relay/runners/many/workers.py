"""``relay dispatch --once|--loop`` over many outbox databases (``RELAY_DATABASES``) in ONE
process, within a connection budget (``RELAY_MAX_CONNECTIONS``, ``RELAY_MAX_SERVER_CONNECTIONS``).

Each database keeps its own dispatcher: its store, its leases (its own lease domain), its
circuit breaker and its retries. What they share is a few worker threads, each with one broker
connection, and the budget: a database holds a connection only while a worker runs a unit of
work for it (a short drain, :data:`QUANTUM_SECONDS`) and, while it has rows left, parked
between its units; an idle database holds none. :class:`relay.runners.many.schedule.Schedule`
(pure) decides which database runs next (the least served, so a million-row backlog cannot
starve a quiet database), when an idle one is looked at again, and whose parked connection is
closed when another needs the slot. Wake-ups cost one connection per PostgreSQL *server*
(:class:`ServerWatcher`, reading which databases inserted rows), not one per database.

Why this answers what :mod:`relay.runners.supervisor` measured: a turn-taking loop made a quiet
database wait for the busy one's whole drain (seconds) and a database that was down stalled
every turn; here the busy database runs on one worker at a time in units of one or two
batches while the other workers serve the rest, and a database that is down fails its own
unit within its connect deadline and rests on its own backoff. Threads do share the
interpreter lock, which costs the quiet database a switch interval per round trip: the bench
(``python -m bench --only tenants``, docs/benchmarks.md) measures its p99 beside a noisy one.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from relay.config import Settings, timing
from relay.config.databases import Fleet, Member
from relay.dispatch import runtime as runtimes
from relay.dispatch.dispatcher import Dispatcher, Report
from relay.dispatch.runtime import Runtime
from relay.dispatch.stopping import StopGuard
from relay.exceptions import RelayError, StoreError
from relay.observe import gauges, heartbeat
from relay.observe.gauges import Reading
from relay.policy import Backoff
from relay.publishers import Publisher
from relay.runners.many.schedule import Schedule, Unit
from relay.runners.process import dump_stacks_on
from relay.wakeup.serverwatch import server_watches

log = logging.getLogger("relay")

#: A unit of work: one drain of at most this long (its first batch always, then more while
#: time is left), after which the database goes back behind the less-served ones.
QUANTUM_SECONDS = 0.25
#: The databases' first purges are spread over this long after the start.
FIRST_PURGES_SECONDS = 60.0
#: The scheduler looks at its queue at least this often (the heartbeat's pace).
TICK_SECONDS = 0.5
#: A database whose unit failed for a reason retrying cannot mend (no outbox table, a
#: permission) is tried again this rarely, logged each time.
BROKEN_REST_SECONDS = 60.0
#: With a metrics endpoint, each database's outbox gauges are read again at the end of its
#: first unit of work this long after the last reading, on the connection the unit holds (the
#: budget's), never by a scrape: an idle database's are as old as its idle looks are apart.
READINGS_SECONDS = 15.0


@dataclass
class Served:
    """One database as this runner serves it: its runtime, and how its failed units rest."""

    runtime: Runtime
    backoff: Backoff = field(
        default_factory=lambda: Backoff(
            timing.DATABASE_RETRY_FIRST_SECONDS, timing.DATABASE_RETRY_MAX_SECONDS
        )
    )
    #: Its last unit failed for a reason retrying cannot mend (no outbox table, a permission).
    failed: bool = False
    #: Its outbox gauges as last read (None: not yet, or no metrics endpoint), and when.
    reading: Reading | None = None
    read_at: float = -float("inf")


@dataclass(frozen=True, slots=True)
class Done:
    """A worker's word back to the scheduler."""

    name: str
    unit: Unit | None
    started: float
    report: Report | None = None
    error: BaseException | None = None


class ManyDatabases:
    """The scheduler, its workers and its wake-ups; :func:`run` drives it."""

    def __init__(self, fleet: Fleet, *, once: bool = False) -> None:
        self.fleet, self.once = fleet, once
        self.settings = fleet.settings
        now = time.monotonic()
        self.schedule = Schedule.for_fleet(fleet, now, watching=not once)
        self.workers = min(self.schedule.slots, len(fleet.members))
        self.databases = {
            name: Served(runtime)
            for name, runtime in runtimes.for_fleet(fleet, one_connection=True).items()
        }
        first = next(iter(self.databases.values())).runtime
        self.observer = first.observer
        # The first purges spread over a minute, not all at the first idle moment.
        for i, db in enumerate(self.databases.values()):
            spread = min(db.runtime.settings.purge_interval_seconds, FIRST_PURGES_SECONDS)
            db.runtime.purge_at = now + spread * i / len(self.databases)
        self.watches = [] if once else server_watches(fleet, self.wake)
        self.stop = threading.Event()
        #: SIGHUP: read ``RELAY_DATABASES=@PATH`` again (:mod:`relay.runners.many.reload`).
        self.reload_requested = threading.Event()
        self.threads: list[threading.Thread] = []
        self._events: queue.Queue[Done | tuple[str, ...]] = queue.Queue()
        self._jobs: queue.Queue[str | None] = queue.Queue()
        self._started: dict[str, float] = {}
        self.report = Report()
        self.failures: list[str] = []
        #: Units of work run, and the seconds they took in all (logged at the end).
        self.units, self.unit_seconds = 0, 0.0
        #: Whether units read their database's gauges (a metrics endpoint serves them).
        self.reads_gauges = False

    def serve(self, member: Member, purge_at: float) -> Served:
        """A database to serve: its runtime on one connection, which the budget counts as one
        slot, sharing this process's observer; its first purge share due at ``purge_at``."""
        runtime = Runtime(member.name, member.settings, observer=self.observer, one_connection=True)
        runtime.purge_at = purge_at
        return Served(runtime)

    # -- wake-ups ---------------------------------------------------------------------------
    def wake(self, names: tuple[str, ...]) -> None:
        """From a watcher's thread: rows were inserted in ``names`` (empty: perhaps anywhere)."""
        self._events.put(names)

    # -- the budget as the metrics and the doctor read it -----------------------------------
    def budget(self) -> dict[str, int]:
        """The connection budget now: slots, connections held, databases waiting."""
        now = time.monotonic()
        return {
            "budget": self.settings.max_connections,
            "in_use": self.schedule.in_use() + sum(w.connected for w in self.watches),
            "waiting": self.schedule.waiting(now),
            "databases": len(self.databases),
        }

    def readings(self) -> dict[str, Reading]:
        """Each database's outbox gauges as last read (the metrics endpoint's)."""
        return {n: db.reading for n, db in list(self.databases.items()) if db.reading is not None}

    def hung(self) -> bool:
        """A unit has run longer than a lease: every call in it has a shorter deadline, so it
        is stuck, and liveness (``--heartbeat-file``) must say so."""
        oldest = min(self._started.values(), default=None)
        return oldest is not None and time.monotonic() - oldest > self.settings.lease_seconds

    # -- the loop ---------------------------------------------------------------------------
    def start_workers(self, count: int) -> None:
        """``count`` more worker threads, each with its own broker connection."""
        for _ in range(count):
            t = threading.Thread(
                target=self._work, name=f"relay-tenant-{len(self.threads)}", daemon=True
            )
            self.threads.append(t)
            t.start()

    def run(self, beat: Callable[[], None] | None = None) -> Report:
        from relay.runners.many import reload

        self.start_workers(self.workers)
        for w in self.watches:
            w.start()
        idle = self.workers
        remaining = set(self.databases)
        try:
            while not self.stop.is_set() and (remaining or not self.once):
                if beat is not None and not self.hung():
                    beat()
                idle += self._settle(remaining)
                if self.reload_requested.is_set():
                    started = reload.apply(self)
                    if started is not None:  # None: a database to drop is still running
                        self.reload_requested.clear()
                        idle += started
                handed, due = self._dispatch(idle)
                idle -= handed
                self._wait(due)
        finally:
            for w in self.watches:
                w.stop()
            self.stop.set()
            for _ in self.threads:
                self._jobs.put(None)
            deadline = time.monotonic() + timing.STOP_SECONDS
            for t in self.threads:
                t.join(max(0.1, deadline - time.monotonic()))
            for db in self.databases.values():
                db.runtime.close()
        return self.report

    def _wait(self, due: float | None) -> None:
        """Until a worker finishes, a wake-up comes or the next database is ``due``; databases
        already due but not handed out wait for a worker or a connection, so for an event."""
        now = time.monotonic()
        wait = TICK_SECONDS if due is None or due <= now else due - now
        try:
            item = self._events.get(timeout=min(TICK_SECONDS, max(0.0, wait)))
        except queue.Empty:
            return
        self._events.put(item)  # settled on the next pass, with whatever else came

    def _settle(self, remaining: set[str]) -> int:
        """Take in the workers' results and the wake-ups; returns the workers freed."""
        freed = 0
        now = time.monotonic()
        while True:
            try:
                item = self._events.get_nowait()
            except queue.Empty:
                return freed
            if isinstance(item, tuple):
                if item:
                    self.schedule.wake(item, now)
                else:
                    self.schedule.wake_all(now)
                continue
            freed += 1
            self._started.pop(item.name, None)
            entry = self.schedule.entries[item.name]
            db = self.databases[item.name]
            self.units += 1
            self.unit_seconds += now - item.started
            if item.report is not None:
                self.report.add(item.report)
            if item.unit is None:  # the unit failed
                rest = BROKEN_REST_SECONDS if db.failed else db.backoff.next()
                self.schedule.failed(entry, rest, now)
                db.runtime.release()
                if self.once:
                    self.failures.append(item.name)
                    remaining.discard(item.name)
                continue
            db.backoff.reset()
            if not self.schedule.finish(entry, item.unit, item.started, now):
                db.runtime.release()
            if self.once and item.unit.drained and not item.unit.claimed:
                remaining.discard(item.name)
                entry.due_at = float("inf")

    def _dispatch(self, idle: int) -> tuple[int, float | None]:
        """Hand due databases to idle workers, within the budget; returns how many, and when
        the next database not running is due."""
        handed, due = self.schedule.hand_out(time.monotonic(), idle)
        for entry, evicted in handed:
            if evicted is not None:
                self.databases[evicted.name].runtime.release()
            self._started[entry.name] = time.monotonic()
            self._jobs.put(entry.name)
        return len(handed), due

    def _work(self) -> None:
        publisher = runtimes.publisher(self.settings, self.observer)
        try:
            while True:
                name = self._jobs.get()
                if name is None:
                    return
                self._events.put(self._unit(name, publisher))
        finally:
            publisher.close()

    def _unit(self, name: str, publisher: Publisher) -> Done:
        db = self.databases[name]
        started = time.monotonic()
        try:
            relay = db.runtime.dispatcher(publisher)
            report, drained = self._relay(relay, db.runtime.settings.batch_size)
            if drained and time.monotonic() >= db.runtime.purge_at and not self.once:
                db.runtime.purge_share(self.stop)
        except StoreError as exc:
            db.failed = not exc.retryable
            log.warning("database %r unavailable, resting: %s", name, exc)
            if self.reads_gauges:
                db.reading, db.read_at = Reading(up=False), time.monotonic()
            return Done(name, None, started, error=exc)
        except RelayError as exc:
            db.failed = True
            log.error("database %r failed its unit: %s", name, exc)
            return Done(name, None, started, error=exc)
        except Exception as exc:  # a bug: that database rests, the others go on
            db.failed = True
            log.exception("database %r failed its unit", name)
            return Done(name, None, started, error=exc)
        db.failed = False
        if self.reads_gauges and time.monotonic() - db.read_at >= READINGS_SECONDS:
            db.reading, db.read_at = gauges.read(db.runtime.operations()), time.monotonic()
        rest = 0.0
        if report.broker_error:
            rest = max(relay.breaker.remaining(relay.clock()), timing.BROKER_REST_MIN_SECONDS)
        unit = Unit(claimed=report.claimed, drained=drained, rest=rest)
        return Done(name, unit, started, report=report)

    def _relay(self, relay: Dispatcher, batch_size: int) -> tuple[Report, bool]:
        """One unit's work: one cycle (claim, publish, record: two transactions), and a drain
        of at most :data:`QUANTUM_SECONDS` when its claim came back full. A short claim ends
        the unit as drained: what it left (rows another relay holds, a key held back) is the
        next look's, and a trickle costs no third transaction to find the outbox empty."""
        report = relay.run_once()
        if report.claimed < batch_size or report.broker_error or self.stop.is_set():
            return report, True
        report.add(relay.drain(budget_seconds=QUANTUM_SECONDS, stop=self.stop))
        return report, report.drained


def run(settings: Settings, *, once: bool, heartbeat_file: str | None = None) -> Report:
    """Every configured database relayed by this one process until all drained (``once``) or
    SIGTERM/SIGINT. Raises ``SystemExit(1)`` in ``once`` mode when a database failed."""
    dump_stacks_on(signal.SIGUSR1)
    many = ManyDatabases(Fleet.from_settings(settings), once=once)
    log.info(
        "relay starting over %d databases in one process, %d connections at most "
        "(%d workers, %d wake-up connections): %s",
        len(many.databases),
        settings.max_connections,
        many.workers,
        len(many.watches),
        settings.describe(),
    )

    # SIGTERM within the bound every relay process keeps (relay.dispatch.stopping): a warm
    # stop, forced if a unit is still blocked when the deadline comes.
    guard = StopGuard()

    def on_signal(*_: object) -> None:
        guard.signalled()
        many.stop.set()
        many.wake(("",))

    def on_hangup(*_: object) -> None:  # kill -HUP: RELAY_DATABASES=@PATH read again
        many.reload_requested.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    if not once:
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_hangup)
    if settings.metrics_port is not None and not once:
        from relay.observe import budget

        many.reads_gauges = True
        budget.serve(settings.metrics_port, many.budget, many.readings)
    try:
        beat = heartbeat.beats(
            heartbeat_file,
            timing.liveness_seconds(settings.lease_seconds, settings.confirm_timeout_seconds),
        )
        report = many.run(beat)
    finally:
        guard.disarm()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info(
        "relay over %d databases done: %s; %d units of work, %.1f ms each on average",
        len(many.databases),
        report,
        many.units,
        1000 * many.unit_seconds / max(1, many.units),
    )
    if many.failures:
        raise SystemExit(1)
    return report
