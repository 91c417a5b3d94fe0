"""The relay's own tasks on a Celery app: ``claim_and_dispatch``, the beat's ``tick`` and
``purge_sent``, their settings, and the signals that tie them to the worker's processes.

Fan-out rule of the tick (every ``RELAY_TICK_SECONDS``): the tick drains like any
``claim_and_dispatch``, so an idle outbox costs one claim statement and no message. When its
first batch comes back full there is a backlog: it counts the claimable rows, at most
``batch_size * max_fanout`` of them (a bounded scan of the partial index), and sends one more
``claim_and_dispatch`` per batch counted, capped at ``max_fanout - 1``. Each task keeps draining
while batches come back full, so one task per worker process keeps the fleet busy; tasks beyond
the fleet's size only wait in the queue and expire after one tick.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from celery import Celery, signals
from celery.exceptions import SoftTimeLimitExceeded

from relay.celery import steady
from relay.celery.acks import PromptAcks
from relay.celery.many_databases import Runtimes, drain_budget, fleet_tick
from relay.celery.names import CLAIM_AND_DISPATCH, PURGE_SENT, TICK
from relay.celery.wakeup import enable_wakeup, watch_in_beat
from relay.config import Settings, timing
from relay.config.databases import Fleet
from relay.dispatch.dispatcher import Report
from relay.dispatch.runtime import Runtime
from relay.exceptions import RelayError
from relay.publishers import transports
from relay.runners.process import serve_worker_metrics

log = logging.getLogger(__name__)


def fanout(backlog: int, batch_size: int, max_fanout: int) -> int:
    """Extra ``claim_and_dispatch`` tasks a tick sends beside its own drain (see module doc)."""
    if backlog <= 0:
        return 0
    return min(max_fanout - 1, math.ceil(backlog / batch_size))


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings of the relay's own app (``celeryconfig.py`` exposes the same).
    A TLS broker URL's options become ``broker_use_ssl`` (:mod:`relay.config.tls`)."""
    broker_url, broker_tls = transports.broker_tls(settings.broker_url)
    return {
        "broker_url": broker_url,
        "broker_use_ssl": broker_tls.kombu_ssl(),
        "broker_transport_options": transports.transport_options(settings.broker_url),
        "broker_connection_retry_on_startup": True,
        "task_default_queue": settings.queue,
        "task_ignore_result": True,
        "result_backend": None,
        "task_serializer": "json",
        "accept_content": ["json"],
        # The lease, not the broker, guards each row: a task lost with its worker is replaced by
        # the next tick, so acknowledging on receipt costs nothing and avoids redeliveries.
        "task_acks_late": False,
        # A prefetched task waits behind a whole drain; reserving as few as the pool can run
        # (the multiplier times the concurrency: a solo worker's concurrency is the CPU count
        # unless set) lets idle workers take the fan-out instead.
        "worker_prefetch_multiplier": 1,
        "timezone": "UTC",
        "enable_utc": True,
        # Beat sleeps until each tick instead of looping through its last 10 ms (the -S flag
        # still chooses another scheduler).
        "beat_scheduler": steady.NAME,
    }


def _summary(report: Report) -> dict[str, Any]:
    keys = ("claimed", "sent", "rescheduled", "buried", "released", "lost", "broker_error")
    return {k: getattr(report, k) for k in keys}


def _serve_metrics(app: Celery, settings: Settings) -> Callable[..., None]:
    """The ``worker_init`` handler that starts the worker's Prometheus endpoint in the main
    process, before the pool forks (:func:`relay.runners.process.serve_worker_metrics`)."""

    def start(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", app) is not app:
            return
        serve_worker_metrics(settings)

    return start


def install(app: Celery, settings: Settings, *, wakeup: bool = True) -> Runtime:
    """Register the relay's tasks and beat entries on ``app``; with ``wakeup``, wire
    :func:`enable_wakeup`. Returns the per-process runtime the tasks use.

    Every message the relay sends names ``settings.queue`` (Celery deprecates a per-task queue
    attribute, and ``install`` leaves the app's routes alone).
    """
    # filesystem:// (the embedded default) means the relay's atomic variant in this app too.
    transports.register()
    runtimes = Runtimes(Fleet.from_settings(settings))
    runtime = runtimes.get(None)
    budget = drain_budget(runtimes)
    s = settings
    common: dict[str, Any] = {
        # Not shared: Celery would otherwise copy these closures, bound to this app's settings,
        # into every app created later in the process.
        "shared": False,
        "ignore_result": True,
        "acks_late": False,
        # A drain's budget is half the lease; past 90% of it something hangs. The lease keeper
        # stops with the task, so the rows become reclaimable when the lease runs out.
        "soft_time_limit": max(1, int(s.lease_seconds * timing.SOFT_LIMIT_SHARE_OF_LEASE)),
        "time_limit": max(2, math.ceil(s.lease_seconds)),
    }

    @app.task(name=CLAIM_AND_DISPATCH, expires=s.tick_seconds, **common)
    def claim_and_dispatch(source: str | None = None) -> dict[str, Any]:
        """Drain the outbox (of database ``source``; None: each database in turn) within the
        budget; any number may run at once (the lease decides)."""
        report = Report()
        runtimes.refresh()
        for rt in runtimes.chosen(source):
            if not rt.stopping.is_set():
                with rt.held():  # over several databases: no connection held between tasks
                    _guarded(_drain_into(report, rt, budget), alone=not runtimes.several)
        return _summary(report)

    # When this process next records the tick's heartbeat (monotonic).
    beat_due = [0.0]

    @app.task(name=TICK, expires=s.tick_seconds, **common)
    def tick() -> dict[str, Any]:
        """Drain, and when the first batch shows a backlog, fan out more drains."""
        report, extra = Report(), 0
        if runtime.stopping.is_set():
            return {"fanout": 0, **_summary(report)}
        if runtimes.several:
            runtimes.refresh()
            shares = fleet_tick(
                runtimes,
                lambda name: claim_and_dispatch.apply_async(
                    (name,), expires=s.tick_seconds, queue=s.queue
                ),
            )
            return {"fanout": sum(shares.values()), "databases": shares, **_summary(report)}

        def work() -> None:
            nonlocal extra
            dispatcher = runtime.dispatcher()
            now = time.monotonic()
            if now >= beat_due[0]:  # `relay doctor` tells how long ago beat last ticked
                runtime.operations().beat(TICK)
                beat_due[0] = now + timing.TICK_RECORD_SECONDS
            report.add(dispatcher.run_once())
            if report.drained or report.broker_error:
                return
            backlog = runtime.store().backlog(s.batch_size * s.max_fanout)
            extra = fanout(backlog, s.batch_size, s.max_fanout)
            for _ in range(extra):
                claim_and_dispatch.apply_async(expires=s.tick_seconds, queue=s.queue)
            report.add(dispatcher.drain(stop=runtime.stopping))

        _guarded(work)
        return {"fanout": extra, **_summary(report)}

    @app.task(name=PURGE_SENT, expires=s.purge_interval_seconds, ignore_result=True, shared=False)
    def purge_sent() -> int:
        """Delete sent rows past the retention until none is left, paced, one purger at a
        time per database (:mod:`relay.retention.purger`), the databases sharing one purge
        interval; one database's failure is logged and the others are still purged."""
        deleted = 0
        runtimes.refresh()
        chosen = list(runtimes)
        share = s.purge_interval_seconds / len(chosen)
        for name, rt in chosen:
            try:
                with rt.held():
                    deleted += rt.purger().run(budget_seconds=share, stop=rt.stopping).deleted
            except RelayError as exc:
                if not runtimes.several:
                    raise
                log.warning("purge of database %r failed, the next one retries: %s", name, exc)
        return deleted

    app.add_periodic_task(
        s.tick_seconds, tick.signature(), name=TICK, expires=s.tick_seconds, queue=s.queue
    )
    app.add_periodic_task(
        s.purge_interval_seconds,
        purge_sent.signature(),
        name=PURGE_SENT,
        expires=s.purge_interval_seconds,
        queue=s.queue,
    )
    # weak=False: these handlers are bound methods of a runtime nothing else may reference.
    signals.worker_process_init.connect(runtimes.forget, weak=False)
    signals.worker_shutting_down.connect(runtimes.stop, weak=False)
    signals.worker_process_shutdown.connect(runtimes.close, weak=False)
    signals.worker_shutdown.connect(runtimes.close, weak=False)
    if wakeup:
        enable_wakeup(app, settings)
    signals.beat_init.connect(watch_in_beat(app, runtimes.fleet), weak=False)
    signals.worker_ready.connect(PromptAcks.on_worker_ready(app), weak=False)
    if settings.metrics_port is not None:
        signals.worker_init.connect(_serve_metrics(app, runtime.settings), weak=False)
    return runtime


def _drain_into(report: Report, runtime: Runtime, budget: float | None) -> Callable[[], None]:
    return lambda: report.add(runtime.dispatcher().drain(budget, runtime.stopping))


def _guarded(work: Callable[[], None], *, alone: bool = True) -> None:
    try:
        work()
    except SoftTimeLimitExceeded:
        log.warning("relay task hit its soft time limit; its leased rows will be reclaimed")
    except RelayError as exc:
        if alone:
            raise
        # One database down must not stop the task's drains of the others.
        log.warning("relay drain of one database failed, the next tick retries it: %s", exc)


def create_app(settings: Settings | None = None) -> Celery:
    """A Celery app running only the relay, configured from ``settings`` (default: env)."""
    settings = Settings.from_env() if settings is None else settings
    app = Celery("relay")
    app.conf.update(celery_config(settings))
    install(app, settings)
    return app
