"""The one per-database runtime: everything that relays one outbox database, built in one place.

A :class:`Runtime` holds one database's relay parts: its engine within the connection budget
(:func:`engine_options`), the dispatch store, the :class:`~relay.dispatch.dispatcher.Dispatcher`
(with its lease keeper and circuit breaker), its wake-up hook (:meth:`Runtime.wake_watcher`),
its share of the retention purge and its operations store for the metrics' gauges. Every runner
builds its databases through it: ``relay dispatch --loop`` over one database
(:mod:`relay.runners.loop`), many databases in one process (:mod:`relay.runners.many`), a
process per database (:mod:`relay.runners.supervisor`, whose children are the loop runner) and
the Celery fleet (:mod:`relay.celery.many_databases`). A runner decides *when* and *how many*;
how a database is relayed is decided here, once.

Parts are built on first use, after a fork too (a Celery worker's pool forks after the app is
set up): a process never uses the connections or threads its parent built.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import make_url

from relay import publishers
from relay.config import Settings, timing
from relay.config.urls import normalize_url
from relay.dispatch.dispatcher import Dispatcher
from relay.exceptions import RelayError
from relay.observe.observers import Observer, Observers
from relay.publishers import Publisher
from relay.store.dispatch_path.store import DispatchStore, dispatch_engine_kwargs
from relay.store.engine import APPLICATION_NAME
from relay.store.schema import compat

if TYPE_CHECKING:
    from relay.config.databases import Fleet
    from relay.retention.purger import PurgeLoop, Purger
    from relay.store.operations.store import OperationsStore
    from relay.wakeup.watcher import Poller, SequenceWatcher

log = logging.getLogger("relay")
# The beat's watcher logs as it did from the Celery glue.
log_celery = logging.getLogger("relay.celery.wakeup")

#: The longest one purge share of a unit of work runs (:meth:`Runtime.purge_share`); a purge
#: that did not catch up goes on at the next share.
PURGE_SHARE_SECONDS = 1.0
#: After a purge share that left rows past the retention, the next one is due this soon.
PURGE_AGAIN_SECONDS = 0.25


def engine_options(settings: Settings, *, one_connection: bool = False) -> dict[str, Any]:
    """The connection options of one database's engine, for every runner alike: deadlines from
    the lease and the watchdog (:func:`~relay.store.dispatch_path.store.dispatch_engine_kwargs`),
    the relay's application name on PostgreSQL (unless the URL sets its own), and with
    ``one_connection`` a pool of one connection that the budget counts as one slot."""
    options = dispatch_engine_kwargs(settings)
    url = make_url(normalize_url(settings.database_url))
    if url.get_backend_name() == "postgresql" and "application_name" not in url.query:
        options["connect_args"] = {"application_name": APPLICATION_NAME}
    if one_connection:
        # The drain's database thread, the lease keeper and the recheck take turns on the one
        # connection (each holds it for one short transaction): a turn waits a lease share at
        # most. Connections live for a unit or two, so no ping before each transaction (a
        # round trip each); a dead one fails the unit, which retries.
        options.update(
            pool_size=1,
            max_overflow=0,
            pool_timeout=settings.lease_seconds * timing.RENEW_SHARE_OF_LEASE,
            pool_pre_ping=False,
        )
    return options


def observer(settings: Settings) -> Observer:
    """The observers a relay process runs with: Prometheus metrics when ``RELAY_METRICS_PORT``
    is set, publish spans when OpenTelemetry is installed; the no-op base otherwise."""
    from relay.observe import tracing

    chosen: list[Observer] = []
    if settings.metrics_port is not None:
        from relay.observe import metrics

        chosen.append(metrics.PrometheusObserver.shared(settings.metrics_max_event_types))
    if tracing.available():
        system = tracing.messaging_system(settings.events_connection_url)
        chosen.append(tracing.PublishTracer(settings.exchange, system))
    if not chosen:
        return Observer()
    return chosen[0] if len(chosen) == 1 else Observers(chosen)


def publisher(settings: Settings, observer: Observer | None = None) -> Publisher:
    """The events publisher ``settings`` describe (``RELAY_EVENTS_URL``), telling ``observer``
    when the broker blocks the connection."""
    return publishers.for_settings(settings, None if observer is None else observer.broker_blocked)


def for_fleet(fleet: Fleet, *, one_connection: bool) -> dict[str, Runtime]:
    """A runtime for each of ``fleet``'s databases, by name, sharing one observer (the one
    ``fleet.settings`` describe): what a runner over several databases relays with."""
    shared = observer(fleet.settings)
    return {
        m.name: Runtime(m.name, m.settings, observer=shared, one_connection=one_connection)
        for m in fleet.members
    }


class Runtime:
    """Everything that relays one outbox database (see the module's docstring).

    ``one_connection``: the engine holds one connection at most, and :meth:`held` gives it
    back when its last use ends, so that a database that is not being relayed holds none (many
    databases within a budget). ``observer`` is shared by the process's runtimes."""

    def __init__(
        self,
        name: str,
        settings: Settings,
        *,
        observer: Observer | None = None,
        one_connection: bool = False,
    ) -> None:
        self.name, self.settings, self.one_connection = name, settings, one_connection
        self.observer = observer
        #: Set by a warm shutdown (a Celery worker's): drains stop after the batch in flight.
        self.stopping = threading.Event()
        self._dispatcher: Dispatcher | None = None
        self._store: DispatchStore | None = None
        self._operations: OperationsStore | None = None
        self._purger: Purger | None = None
        self._pid = 0
        #: Whether the schema was found new enough (once per runtime, :meth:`dispatcher`).
        self._schema_checked = False
        #: Whether the dispatcher's publisher is this runtime's own (closed with it), not a
        #: worker thread's that it was lent.
        self._owns_publisher = False
        self._users = 0
        self._lock = threading.Lock()
        #: When this database's next purge share is due (:meth:`purge_share`), monotonic.
        self.purge_at = 0.0

    # -- the parts ---------------------------------------------------------------------------
    def dispatcher(self, publisher_: Publisher | None = None) -> Dispatcher:
        """The dispatcher, built on first use in this process; with ``publisher_`` it
        publishes through that one (a many-databases worker thread's) from now on."""
        if self._pid != os.getpid():
            self.forget()
        if self._dispatcher is None:
            if self.observer is None:
                self.observer = observer(self.settings)
            self._owns_publisher = publisher_ is None
            relay = self._dispatcher = Dispatcher.from_settings(
                self.settings,
                publisher=publisher_ or publisher(self.settings, self.observer),
                engine_options=engine_options(self.settings, one_connection=self.one_connection),
                observer=self.observer,
            )
            assert isinstance(relay.store, DispatchStore)  # from_settings built it
            self._store, self._pid = relay.store, os.getpid()
        if not self._schema_checked:
            # Refuses a schema older than this code reads (SchemaOutOfDate, before any claim);
            # a database that cannot be reached now is looked at again at the next use.
            assert self._store is not None  # built with the dispatcher
            self._schema_checked = compat.require(self._store.engine, self.name)
        elif publisher_ is not None:
            self._dispatcher.publisher, self._owns_publisher = publisher_, False
        return self._dispatcher

    def store(self) -> DispatchStore:
        """The dispatcher's store (the tick's backlog counts through it)."""
        self.dispatcher()
        assert self._store is not None  # built with the dispatcher
        return self._store

    def operations(self) -> OperationsStore:
        """The operator's verbs (heartbeats, the metrics' gauges) on the dispatcher's engine."""
        from relay.store.operations.store import OperationsStore

        store = self.store()  # first: after a fork it drops the parent's parts
        if self._operations is None:
            self._operations = OperationsStore(store.engine)
        return self._operations

    def purger(self) -> Purger:
        """The retention purger on the dispatcher's engine, leasing as this dispatcher."""
        from relay.retention.purger import Purger
        from relay.store.operations.retention import RetentionStore

        relay = self.dispatcher()
        if self._purger is None:
            store = RetentionStore(self.store().engine)
            self._purger = Purger(store, self.settings.retention_seconds, relay.worker_id)
        return self._purger

    # -- its share of the work beside the relaying ---------------------------------------------
    def purge_loop(self) -> PurgeLoop:
        """The retention purge in a thread of its own, started: a run every purge interval
        (a loop runner's)."""
        from relay.retention.purger import PurgeLoop

        return PurgeLoop(self.purger(), self.settings.purge_interval_seconds).start()

    def purge_share(self, stop: threading.Event) -> None:
        """One share of the retention purge inside a unit of work (many databases in one
        process): at most :data:`PURGE_SHARE_SECONDS`; the next share is due at once when it
        left rows behind, else after the purge interval. A failed purge is logged; the
        relaying goes on."""
        interval = self.settings.purge_interval_seconds
        try:
            run = self.purger().run(budget_seconds=PURGE_SHARE_SECONDS, stop=stop)
        except RelayError as exc:
            log.warning("retention purge of database %r failed: %s", self.name, exc)
            self.purge_at = time.monotonic() + interval
            return
        caught_up = run.skipped or run.behind == 0
        self.purge_at = time.monotonic() + (interval if caught_up else PURGE_AGAIN_SECONDS)

    def wake_watcher(
        self, on_wake: Callable[[], None], *, on_unwatchable: Callable[[], None] | None = None
    ) -> SequenceWatcher | None:
        """This database's wake-up hook: on PostgreSQL with ``RELAY_NOTIFY`` on, a started
        :class:`~relay.wakeup.watcher.SequenceWatcher` (on ``RELAY_LISTEN_URL`` when set)
        calling ``on_wake`` when rows were committed, and ``on_unwatchable`` if it finds it
        cannot read the sequence; otherwise None (the runner polls)."""
        from relay.wakeup import watcher

        s = self.settings
        if not (s.notify and watcher.supports(s.database_url)):
            return None
        # Two connections: the reader keeps one for its looks, the looks for rows take the other.
        options = engine_options(s)
        store = DispatchStore.from_url(
            s.listen_connection_url, pool_size=2, variable=s.listen_variable, **options
        )
        return watcher.SequenceWatcher(
            store,
            on_wake,
            s.poll_floor_seconds,
            idle=s.watch_idle_seconds,
            period=s.tick_seconds,
            on_unwatchable=on_unwatchable,
        ).start()

    def watcher(self, on_found: Callable[[], None]) -> SequenceWatcher | Poller:
        """The deployment's one watcher of new rows (a Celery beat's), started: the sequence
        watcher on PostgreSQL, elsewhere (or when the sequence cannot be read) a poller, floor
        to tick, on connections of its own."""
        from relay.wakeup.watcher import Poller, poll_instead

        s, options = self.settings, engine_options(self.settings)
        floor, idle = s.poll_floor_seconds, s.idle_poll_seconds
        instead = poll_instead(s.database_url, on_found, floor, idle, **options)
        found = self.wake_watcher(on_found, on_unwatchable=instead)
        if found is not None:
            return found
        store = DispatchStore.from_url(s.database_url, **options)
        poller = Poller(store, on_found, floor, idle).start()
        log_celery.info("relay poller started: every %gs to %gs", floor, idle)
        return poller

    # -- connections and life -------------------------------------------------------------------
    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Around each use (a drain, a count, a purge): with ``one_connection``, when the last
        use in this process ends, the connection is closed (and the drain's database thread);
        the dispatcher, its breaker and its retries stay. Counted, because a tick's count that
        outlived its wait may still run beside the next task's drain."""
        with self._lock:
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                last = self._users == 0
            if last and self.one_connection and self._pid == os.getpid():
                self.release()

    def release(self) -> None:
        """Close the connection (and the drain's database thread) until the next use."""
        if self._dispatcher is not None:
            self._dispatcher.close()
        if self._store is not None:
            self._store.engine.dispose()

    def forget(self, *_: Any, **__: Any) -> None:
        """After fork: drop what the parent built without closing it (its sockets are shared)."""
        if self._store is not None:
            self._store.engine.dispose(close=False)
        self._dispatcher = self._store = self._operations = self._purger = None
        self._pid = 0
        self.stopping.clear()

    def stop(self, *_: Any, **__: Any) -> None:
        """A warm stop: drains end after the batch in flight."""
        self.stopping.set()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, *_: Any, **__: Any) -> None:
        """Stop the dispatcher's threads, then close its publisher, the purger and the
        connections (in the process that built them)."""
        dispatcher, self._dispatcher = self._dispatcher, None
        store, purger = self._store, self._purger
        self._store = self._operations = self._purger = None
        if self._pid != os.getpid():
            return
        if dispatcher is not None:
            dispatcher.close()
            if self._owns_publisher:
                dispatcher.publisher.close()
        if purger is not None:
            purger.close()
        if store is not None:
            store.dispose()
