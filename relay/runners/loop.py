"""One place that builds a running relay process from :class:`~relay.config.Settings`: the
dispatcher with its observers, the drain loop with its wake-up and heartbeat, the metrics
endpoint, and the deployment's watcher. ``relay dispatch`` and the Celery glue
(:mod:`relay.celery`) both build through here, so the two ways of running the relay cannot drift.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from relay.config import Settings, timing
from relay.dispatch.dispatcher import Dispatcher, Report
from relay.dispatch.stopping import StopGuard
from relay.observe.observers import Observer, Observers
from relay.store.dispatch_path.store import DispatchStore, dispatch_engine_kwargs

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from relay.retention.purger import PurgeLoop
    from relay.wakeup.watcher import Poller, SequenceWatcher

# The CLI's own logger: `relay dispatch` has always logged its start and end under "relay".
log = logging.getLogger("relay")
# The beat's watcher logs as it did from the Celery glue.
log_celery = logging.getLogger("relay.celery.wakeup")


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


def dispatcher(settings: Settings, store: DispatchStore | None = None) -> Dispatcher:
    """The dispatcher ``settings`` describe, with the observers of :func:`observer`, over
    ``store`` (by default one of its own on ``RELAY_DATABASE_URL``)."""
    return Dispatcher.from_settings(settings, store=store, observer=observer(settings))


def shutdown(dispatcher: Dispatcher) -> None:
    """Stop the dispatcher's threads, then close its publisher and its store's connections."""
    dispatcher.close()
    dispatcher.publisher.close()
    dispatcher.store.dispose()


def run(settings: Settings, *, once: bool, heartbeat_file: str | None = None) -> Report:
    """A relay process without Celery: drain once, or drain until SIGTERM/SIGINT with the
    wake-up watcher (or adaptive polling), the heartbeat file and the metrics endpoint."""
    dump_stacks_on(signal.SIGUSR1)
    store = DispatchStore.from_settings(settings)
    relay = dispatcher(settings, store)
    log.info("relay %s starting: %s", relay.worker_id, settings.describe())
    # Armed by the loop's first stop signal; covers the clean-up below as well.
    guard = StopGuard()
    try:
        if once:
            report = relay.drain(budget_seconds=float("inf"))
        else:
            report = _loop(settings, relay, store.engine, heartbeat_file, guard)
    finally:
        shutdown(relay)
        guard.disarm()
    log.info("relay %s done: %s", relay.worker_id, report)
    return report


def _loop(
    settings: Settings,
    relay: Dispatcher,
    engine: Engine,
    heartbeat_file: str | None,
    guard: StopGuard,
) -> Report:
    serve_metrics(settings, engine)
    # ``until`` ends the watched phase: on a signal, or when the watcher finds it cannot read
    # the sequence (a missing privilege); the loop then polls as with RELAY_NOTIFY=0.
    stop, wake, until = threading.Event(), threading.Event(), threading.Event()

    def on_signal(*_: object) -> None:
        guard.signalled()
        stop.set()
        until.set()
        wake.set()

    def on_unwatchable() -> None:
        until.set()
        wake.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    watching = wake_watcher(settings, wake.set, on_unwatchable=on_unwatchable)
    if watching is None:
        log.info(
            "no sequence to watch here: polling every %gs to %gs",
            settings.poll_floor_seconds,
            settings.idle_poll_seconds,
        )
    beat = heartbeat(heartbeat_file, liveness_seconds(settings))
    retention = purge_loop(settings, relay.worker_id)
    try:
        report = relay.loop(until, wake=wake if watching else None, on_pass=beat)
        if not stop.is_set():
            report.add(relay.loop(stop, on_pass=beat))
        return report
    finally:
        retention.stop()
        if watching is not None:
            watching.stop()


def dump_stacks_on(sig: signal.Signals) -> None:
    """``kill -USR1`` prints every thread's stack to stderr, as a Celery worker does: what a
    relay that seems stuck is waiting on. Written by the interpreter itself, at any moment,
    whatever the threads hold."""
    try:
        faulthandler.register(sig, all_threads=True, chain=False)
    except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is an OSError
        # No file descriptor behind sys.stderr (run in a process that captures it): no dump.
        log.debug("no stack dump on %s: sys.stderr has no file descriptor", sig.name)


def purge_loop(settings: Settings, holder: str) -> PurgeLoop:
    """The loop runner's retention purger, started: a run every purge interval, leased so that
    one purger works per database (:mod:`relay.retention.purger`)."""
    from relay.retention.purger import PurgeLoop, Purger

    purger = Purger.from_settings(settings, holder)
    return PurgeLoop(purger, settings.purge_interval_seconds).start()


def wake_watcher(
    settings: Settings,
    on_wake: Callable[[], None],
    *,
    on_unwatchable: Callable[[], None] | None = None,
) -> SequenceWatcher | None:
    """On PostgreSQL with ``RELAY_NOTIFY`` on, a started :class:`SequenceWatcher` (on
    ``RELAY_LISTEN_URL`` when set) calling ``on_wake`` when rows were committed, and
    ``on_unwatchable`` if it finds it cannot read the sequence; otherwise None."""
    # Loaded here, not above: only a loop or a beat watches the outbox.
    from relay.wakeup import watcher

    if not (settings.notify and watcher.supports(settings.database_url)):
        return None
    # Two connections: the reader keeps one for its looks, the looks for rows take the other.
    store = DispatchStore.from_url(
        settings.listen_connection_url,
        pool_size=2,
        variable=settings.listen_variable,
        **dispatch_engine_kwargs(settings),
    )
    return watcher.SequenceWatcher(
        store, on_wake, settings.poll_floor_seconds, on_unwatchable=on_unwatchable
    ).start()


def watcher(settings: Settings, on_found: Callable[[], None]) -> SequenceWatcher | Poller:
    """The deployment's one watcher of new rows, started: the sequence watcher on PostgreSQL,
    elsewhere (or when the sequence cannot be read) a poller, floor to tick."""
    s = settings
    from relay.wakeup.watcher import Poller, poll_instead

    deadlines = dispatch_engine_kwargs(s)
    instead = poll_instead(
        s.database_url, on_found, s.poll_floor_seconds, s.idle_poll_seconds, **deadlines
    )
    found = wake_watcher(s, on_found, on_unwatchable=instead)
    if found is not None:
        return found
    store = DispatchStore.from_url(s.database_url, **deadlines)
    poller = Poller(store, on_found, s.poll_floor_seconds, s.idle_poll_seconds).start()
    log_celery.info(
        "relay poller started: every %gs to %gs", s.poll_floor_seconds, s.idle_poll_seconds
    )
    return poller


def serve_metrics(settings: Settings, engine: Engine) -> None:
    """With ``RELAY_METRICS_PORT`` set, serve this process's metrics and the outbox gauges
    (read through an operations store on ``engine``)."""
    if settings.metrics_port is not None:
        from relay.observe import metrics
        from relay.store.operations.store import OperationsStore

        metrics.serve(settings.metrics_port, OperationsStore(engine))


def serve_worker_metrics(settings: Settings) -> None:
    """In a Celery worker's main process, before the pool forks: the endpoint in multiprocess
    mode, its outbox gauges read on connections it does not pool (of each database, labelled
    ``source``, when the worker drains several; :func:`relay.observe.metrics.serve_worker`)."""
    if settings.metrics_port is None:
        return
    from sqlalchemy.pool import NullPool

    from relay.config.databases import each, several
    from relay.observe import metrics
    from relay.store.operations.store import OperationsStore

    if several(settings):  # one endpoint per worker: every database's gauges, by source
        stores: Any = {
            name: OperationsStore.from_url(s.database_url, poolclass=NullPool)
            for name, s in each(settings)
        }
    else:
        stores = OperationsStore.from_url(settings.database_url, poolclass=NullPool)
    metrics.serve_worker(settings.metrics_port, stores)


def heartbeat(path: str | None, bound: float | None = None) -> Callable[[], None] | None:
    """What the loop calls on every pass (and every second of a rest) to mark itself alive, for
    ``relay probe live``. With ``bound``, the file first says how stale it may grow before the
    process counts as hung (:func:`liveness_seconds`), so the probe needs no settings."""
    if not path:
        return None
    if bound is None:
        return lambda: touch(path)
    first = [True]

    def beat() -> None:
        # Written at the first pass, not before: the file's existence says the loop runs.
        if first[0]:
            write_bound(path, bound)
            first[0] = False
        else:
            touch(path)

    return beat


def liveness_seconds(settings: Settings) -> float:
    """The longest a healthy ``relay dispatch --loop`` goes between two heartbeats, the bound
    the heartbeat file carries for ``relay probe live``: one drain and its slack, derived from
    the lease and the confirm timeout (a rest, however long, beats every second)."""
    return settings.lease_seconds * timing.LIVENESS_LEASES + settings.confirm_timeout_seconds


def write_bound(path: str, bound: float) -> None:
    """Start the heartbeat file afresh with the liveness bound its beats keep."""
    with open(path, "w") as f:
        f.write(f"{BOUND_PREFIX}{bound:g}\n")


#: The heartbeat file's one line: ``stale-after-seconds=70``.
BOUND_PREFIX = "stale-after-seconds="


def touch(path: str) -> None:
    """Mark the loop alive (creates the file)."""
    with open(path, "a"):
        pass
    os.utime(path, None)
