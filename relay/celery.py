"""The Celery glue: the relay's tasks, its beat entries and the after-commit wake-up.

``celery -A relay worker|beat`` finds :data:`app` here by Celery's convention (the package has no
``app`` attribute, so Celery imports ``relay.celery``). To add the relay to an application's
existing Celery app instead, call :func:`install` once where that app is built, and let some
workers consume ``RELAY_QUEUE``::

    from relay.celery import install
    install(app, Settings.from_env())

This is the only module besides ``relay.cli`` that imports Celery.

Fan-out rule of the tick (every ``RELAY_TICK_SECONDS``): the tick drains like any
``claim_and_dispatch``, so an idle outbox costs one claim statement and no message. When its
first batch comes back full there is a backlog: it counts the claimable rows, at most
``batch_size * max_fanout`` of them (a bounded scan of the partial index), and sends one more
``claim_and_dispatch`` per batch counted, capped at ``max_fanout - 1``. Each task keeps draining
while batches come back full, so one task per worker process keeps the fleet busy; tasks beyond
the fleet's size only wait in the queue and expire after one tick.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import kombu
from celery import Celery, Task, bootsteps, current_app, signals
from celery.exceptions import SoftTimeLimitExceeded
from celery.utils import uuid
from kombu.common import Broadcast
from kombu.utils import json as kombu_json
from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session

from relay import inbox, observe, producer, timing, transports
from relay.config import Settings
from relay.consumer import DEFAULT_PREFETCH, Handler, QueueHandlers
from relay.deadletters import DeadLetters
from relay.dispatcher import Dispatcher, Report
from relay.exceptions import EventError

log = logging.getLogger(__name__)

CLAIM_AND_DISPATCH = "relay.claim_and_dispatch"
TICK = "relay.tick"
PURGE_SENT = "relay.purge_sent"
#: Rows per purge transaction, and how many such transactions one purge task runs at most.
PURGE_BATCH_SIZE, PURGE_MAX_BATCHES = 1000, 1000


def fanout(backlog: int, batch_size: int, max_fanout: int) -> int:
    """Extra ``claim_and_dispatch`` tasks a tick sends beside its own drain (see module doc)."""
    if backlog <= 0:
        return 0
    return min(max_fanout - 1, math.ceil(backlog / batch_size))


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings of the relay's own app (``celeryconfig.py`` exposes the same)."""
    return {
        "broker_url": settings.broker_url,
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
        # A prefetched task waits behind a whole drain; reserving one at a time lets idle
        # workers take the fan-out instead.
        "worker_prefetch_multiplier": 1,
        "timezone": "UTC",
        "enable_utc": True,
    }


class Runtime:
    """One worker process's dispatcher: built on first use after fork, closed at shutdown."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        #: Set by a warm shutdown: drains stop after the batch in flight.
        self.stopping = threading.Event()
        self._dispatcher: Dispatcher | None = None
        self._pid = 0

    def dispatcher(self) -> Dispatcher:
        if self._pid != os.getpid():
            self.forget()
        if self._dispatcher is None:
            self._dispatcher = Dispatcher.from_settings(
                self.settings, observer=observe.for_settings(self.settings)
            )
            self._pid = os.getpid()
        return self._dispatcher

    def forget(self, *_: Any, **__: Any) -> None:
        """After fork: drop what the parent built without closing it (its sockets are shared)."""
        if self._dispatcher is not None:
            self._dispatcher.store.engine.dispose(close=False)
        self._dispatcher, self._pid = None, 0
        self.stopping.clear()

    def stop(self, *_: Any, **__: Any) -> None:
        self.stopping.set()

    def close(self, *_: Any, **__: Any) -> None:
        dispatcher, self._dispatcher = self._dispatcher, None
        if dispatcher is not None and self._pid == os.getpid():
            dispatcher.close()
            dispatcher.publisher.close()
            dispatcher.store.dispose()


def _summary(report: Report) -> dict[str, Any]:
    keys = ("claimed", "sent", "rescheduled", "buried", "released", "lost", "broker_error")
    return {k: getattr(report, k) for k in keys}


class Waker:
    """Sends one ``claim_and_dispatch`` after a commit, from a background thread.

    The commit only sets an event, so a slow or dead broker never holds the caller's commit;
    wake-ups arriving while one is being sent coalesce into one more, and with ``min_interval``
    so do those arriving within that long after a send (the beat listener's bound on a burst:
    at most one task per interval). A failed send is logged: the tick picks the events up
    instead.
    """

    def __init__(
        self,
        app: Celery,
        settings: Settings,
        min_interval: float = 0.0,
        *,
        one_queued: bool = False,
    ) -> None:
        self.app, self.settings, self.min_interval = app, settings, min_interval
        #: Send nothing while a relay task already waits in ``RELAY_QUEUE`` (it will drain what
        #: this wake-up is for): under steady load the beat listener keeps at most one queued.
        self.one_queued = one_queued
        #: Wake-up tasks sent so far by this process, and those left out because one waited.
        self.sent = self.skipped = 0
        self._conn: Any = None
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def __call__(self) -> None:
        if self._thread is None or self._pid != os.getpid():
            self._start()
        self._wanted.set()

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None and self._pid == os.getpid():
                return
            # After a fork the parent's thread does not exist here: start this process's own.
            self._wanted = threading.Event()
            self._thread = threading.Thread(target=self._run, name="relay-wake", daemon=True)
            self._pid = os.getpid()
            self._thread.start()

    def _run(self) -> None:
        last = -math.inf
        while True:
            self._wanted.wait()
            gap = last + self.min_interval - time.monotonic()
            if gap > 0:
                time.sleep(gap)  # the rate limit; wake-ups meanwhile fold into this one
            self._wanted.clear()
            last = time.monotonic()
            if self.one_queued and self._queued():
                self.skipped += 1
                continue
            try:
                self.app.send_task(
                    CLAIM_AND_DISPATCH,
                    queue=self.settings.queue,
                    expires=self.settings.tick_seconds,
                    retry=False,
                )
                self.sent += 1
            except Exception as exc:
                log.warning("relay wake-up not sent, the tick will relay the events: %s", exc)

    def _queued(self) -> int:
        """Messages waiting in ``RELAY_QUEUE`` (a passive declare); 0 when that fails."""
        try:
            if self._conn is None:
                self._conn = self.app.connection_for_write()
            declared = self._conn.default_channel.queue_declare(
                queue=self.settings.queue, passive=True
            )
            return int(declared.message_count)
        except Exception:
            # The queue is not declared yet, or the connection broke: send, and reconnect next
            # time.
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                conn.close()
            return 0


def _watch_in_beat(app: Celery, settings: Settings) -> Callable[..., None]:
    """The ``beat_init`` handler that starts the deployment's one watcher in ``app``'s beat and
    turns what it sees into ``claim_and_dispatch`` tasks, at most one per
    ``RELAY_POLL_FLOOR_SECONDS``, so wake-ups never multiply with commits or workers.

    On PostgreSQL with ``RELAY_NOTIFY`` on the watcher is a :class:`relay.listener.Listener`
    holding an advisory lock (a second beat on the same database stands by); elsewhere a
    :class:`relay.listener.Poller` looks for claimable rows adaptively, floor to tick."""

    def start(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", app) is not app:
            return
        from relay import listener
        from relay.store import Store

        s = settings
        waker = Waker(app, s, min_interval=s.poll_floor_seconds, one_queued=True)
        if s.notify and listener.supports(s.database_url):
            listener.Listener(s.database_url, waker, exclusive=True).start()
        else:
            store = Store.from_url(s.database_url)
            listener.Poller(store, waker, s.poll_floor_seconds, s.tick_seconds).start()
            log.info("relay poller started: every %gs to %gs", s.poll_floor_seconds, s.tick_seconds)

    return start


def _serve_metrics(app: Celery, settings: Settings) -> Callable[..., None]:
    """The ``worker_init`` handler that starts the worker's Prometheus endpoint in the main
    process, before the pool forks (:func:`relay.metrics.serve_worker`: multiprocess mode, the
    outbox gauges read by this process alone, on connections it does not pool)."""

    def start(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", app) is not app or settings.metrics_port is None:
            return
        from sqlalchemy.pool import NullPool

        from relay import metrics
        from relay.store import Store

        store = Store.from_url(settings.database_url, poolclass=NullPool)
        metrics.serve_worker(settings.metrics_port, store)

    return start


def enable_wakeup(app: Celery, settings: Settings) -> Waker:
    """Make ``relay.enqueue`` send a ``claim_and_dispatch`` through ``app`` after each commit."""
    waker = Waker(app, settings)
    producer.configure(wake=waker)
    return waker


def install(app: Celery, settings: Settings, *, wakeup: bool = True) -> Runtime:
    """Register the relay's tasks and beat entries on ``app``; with ``wakeup``, wire
    :func:`enable_wakeup`. Returns the per-process runtime the tasks use.

    Every message the relay sends names ``settings.queue`` (Celery deprecates a per-task queue
    attribute, and ``install`` leaves the app's routes alone).
    """
    # filesystem:// (the embedded default) means the relay's atomic variant in this app too.
    transports.register()
    runtime = Runtime(settings)
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
    def claim_and_dispatch() -> dict[str, Any]:
        """Drain the outbox within the budget; any number may run at once (the lease decides)."""
        report = Report()
        if not runtime.stopping.is_set():
            _guarded(lambda: report.add(runtime.dispatcher().drain(stop=runtime.stopping)))
        return _summary(report)

    @app.task(name=TICK, expires=s.tick_seconds, **common)
    def tick() -> dict[str, Any]:
        """Drain, and when the first batch shows a backlog, fan out more drains."""
        report, extra = Report(), 0
        if runtime.stopping.is_set():
            return {"fanout": 0, **_summary(report)}

        def work() -> None:
            nonlocal extra
            dispatcher = runtime.dispatcher()
            dispatcher.store.beat(TICK)  # `relay doctor` tells how long ago beat last ticked
            report.add(dispatcher.run_once())
            if report.drained or report.broker_error:
                return
            backlog = dispatcher.store.backlog(s.batch_size * s.max_fanout)
            extra = fanout(backlog, s.batch_size, s.max_fanout)
            for _ in range(extra):
                claim_and_dispatch.apply_async(expires=s.tick_seconds, queue=s.queue)
            report.add(dispatcher.drain(stop=runtime.stopping))

        _guarded(work)
        return {"fanout": extra, **_summary(report)}

    @app.task(name=PURGE_SENT, expires=s.purge_interval_seconds, ignore_result=True, shared=False)
    def purge_sent() -> int:
        """Delete sent rows past the retention, one short transaction per batch, one purger."""
        store = runtime.dispatcher().store
        deleted = store.purge_sent(
            s.retention_seconds, PURGE_BATCH_SIZE, PURGE_MAX_BATCHES, exclusive=True
        )
        log.info("purged %d sent rows older than %gs", deleted, s.retention_seconds)
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
    signals.worker_process_init.connect(runtime.forget, weak=False)
    signals.worker_shutting_down.connect(runtime.stop, weak=False)
    signals.worker_process_shutdown.connect(runtime.close, weak=False)
    signals.worker_shutdown.connect(runtime.close, weak=False)
    signals.beat_init.connect(_watch_in_beat(app, settings), weak=False)
    if settings.metrics_port is not None:
        signals.worker_init.connect(_serve_metrics(app, settings), weak=False)
    if wakeup:
        enable_wakeup(app, settings)
    return runtime


def _guarded(work: Callable[[], None]) -> None:
    try:
        work()
    except SoftTimeLimitExceeded:
        log.warning("relay task hit its soft time limit; its leased rows will be reclaimed")


def create_app(settings: Settings | None = None) -> Celery:
    """A Celery app running only the relay, configured from ``settings`` (default: env)."""
    settings = Settings.from_env() if settings is None else settings
    app = Celery("relay")
    app.conf.update(celery_config(settings))
    install(app, settings)
    return app


app: Celery


def __getattr__(name: str) -> Any:
    # Built on first access, so `from relay.celery import install` reads no environment.
    if name == "app":
        globals()["app"] = created = create_app()
        return created
    raise AttributeError(f"module 'relay.celery' has no attribute {name!r}")


def send_task(
    session_or_connection: Session | Connection,
    name: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    countdown: float | None = None,
    eta: datetime | None = None,
    expires: float | datetime | None = None,
    queue: str | None = None,
    routing_key: str | None = None,
    headers: Mapping[str, Any] | None = None,
    ordering_key: str | None = None,
    app: Celery | None = None,
) -> str:
    """Write Celery task ``name`` into the outbox in the caller's transaction; returns its
    task id. The relay publishes it once the transaction committed and the countdown or
    ``eta`` is due, as a standard protocol-2 message routed as ``app.send_task`` would route
    it (resolved now, from ``app``, default the current app), with the same task id on every
    attempt; an ``expires`` that passed before publishing leaves the row ``failed`` unsent.
    """
    app = current_app if app is None else app
    if app.conf.task_serializer != "json":
        raise EventError(
            "task_serializer", f"is {app.conf.task_serializer!r}: only json is relayed"
        )
    call_args, call_kwargs = tuple(_sequence(args)), dict(kwargs or {})
    _json_ready("args", call_args)  # refused here, naming the field, before anything is built
    _json_ready("kwargs", call_kwargs)
    delay = _delay_of(countdown, eta)
    options = {k: v for k, v in {"queue": queue, "routing_key": routing_key}.items() if v}
    route = _route(app, app.amqp.router.route(options, name, call_args, call_kwargs))
    task_id = uuid()
    message = app.amqp.as_task_v2(task_id, name, call_args, call_kwargs, expires=expires)
    task = {**route, "headers": message.headers, "properties": message.properties}
    body = _json_ready("args", list(message.body))
    producer.default().enqueue_task(
        session_or_connection,
        name,
        body,
        task,
        headers=headers,
        ordering_key=ordering_key,
        delay=delay,
    )
    return task_id


class TransactionalTask(Task):  # type: ignore[type-arg]  # any task's arguments and result
    """A task class with outbox shortcuts: ``app = Celery(..., task_cls=TransactionalTask)``
    (or ``"relay.celery:TransactionalTask"``) gives every task of the app
    ``add.delay_in(session, 2, 3)`` and ``add.apply_async_in(session, (2, 3), countdown=60)``,
    the transactional twins of ``delay`` and ``apply_async`` (see :func:`send_task`)."""

    def delay_in(
        self, session_or_connection: Session | Connection, *args: Any, **kwargs: Any
    ) -> str:
        return self.apply_async_in(session_or_connection, args, kwargs)

    def apply_async_in(
        self,
        session_or_connection: Session | Connection,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> str:
        return send_task(session_or_connection, self.name, args, kwargs, app=self.app, **options)


def _sequence(args: Sequence[Any]) -> Sequence[Any]:
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise EventError("args", f"must be a list or tuple, not {type(args).__name__}")
    return args


def _json_ready(field: str, value: Any) -> Any:
    """``value`` as the app's JSON serializer (Kombu's) will write it; EventError if it cannot."""
    try:
        return json.loads(kombu_json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise EventError(
            field, f"is not serializable with the task serializer (json): {exc}"
        ) from None


def _delay_of(countdown: float | None, eta: datetime | None) -> float | None:
    if countdown is not None and eta is not None:
        raise EventError("eta", "and countdown are exclusive")
    if eta is None:
        return countdown
    if eta.tzinfo is None:
        raise EventError("eta", "must be timezone-aware")
    return max(0.0, (eta - datetime.now(UTC)).total_seconds())


def _route(app: Celery, options: Mapping[str, Any]) -> dict[str, Any]:
    """Exchange, routing key and the queue to declare, resolved as ``send_task`` resolves them
    (an unnamed exchange or key on a direct exchange becomes the queue's name on the default
    exchange)."""
    queue: Any = options.get("queue")
    exchange = options.get("exchange")
    routing_key, exchange_type = options.get("routing_key"), options.get("exchange_type")
    name = None
    if queue is None and exchange is None:
        queue = app.amqp.default_queue
    if queue is not None:
        name, queue = (
            (queue, app.amqp.queues[queue]) if isinstance(queue, str) else (queue.name, queue)
        )
    if exchange_type is None:
        exchange_type = getattr(getattr(queue, "exchange", None), "type", None) or "direct"
    exchange_name = getattr(exchange, "name", exchange)
    if (not exchange_name or not routing_key) and exchange_type == "direct":
        exchange_name, routing_key = "", name
    elif exchange_name is None:
        exchange_name = queue.exchange.name or app.amqp.default_exchange.name
        routing_key = routing_key or queue.routing_key or app.conf.task_default_routing_key
    declare = None
    if queue is not None and not isinstance(queue, Broadcast):
        declare = {
            "queue": queue.name,
            "exchange": queue.exchange.name if queue.exchange else "",
            "exchange_type": queue.exchange.type if queue.exchange else "direct",
            "routing_key": queue.routing_key or "",
            "durable": bool(queue.durable),
            "arguments": dict(queue.queue_arguments or {}),
        }
    return {"exchange": exchange_name, "routing_key": routing_key, "declare": declare}


class _EventQueues:
    """The event queues ``on_event`` registered on one app, read by the consumer bootstep."""

    def __init__(self, exchange: str, prefetch: int) -> None:
        self.exchange, self.prefetch = exchange, prefetch
        self.queues: dict[str, QueueHandlers] = {}


_EVENT_QUEUES: weakref.WeakKeyDictionary[Celery, _EventQueues] = weakref.WeakKeyDictionary()
PURGE_INBOX = "relay.purge_inbox"


class EventConsumerStep(bootsteps.ConsumerStep):
    """Declares each event queue (durable, bound to the exchange with its patterns, plus its
    ``.dead`` queue) when the worker's consumer starts, and consumes it with bounded prefetch."""

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.registry = _EVENT_QUEUES[parent.app]
        self.dead_channel: Any = None

    def start(self, c: Any) -> None:
        self.dead_channel = c.connection.channel()
        super().start(c)

    def shutdown(self, c: Any) -> None:
        super().shutdown(c)
        if self.dead_channel is not None:
            with contextlib.suppress(Exception):
                self.dead_channel.close()

    def get_consumers(self, channel: Any) -> list[kombu.Consumer]:
        consumers = []
        for handlers in self.registry.queues.values():
            queue = handlers.declare(channel, self.registry.exchange)
            consumers.append(
                kombu.Consumer(
                    channel,
                    [queue],
                    on_message=_settle(handlers, DeadLetters(self.dead_channel, handlers.queue)),
                    accept=["json"],
                    prefetch_count=self.registry.prefetch,
                )
            )
        return consumers


def _settle(handlers: QueueHandlers, dead: DeadLetters) -> Callable[[Any], None]:
    def on_message(message: Any) -> None:
        handlers.on_message(message, dead)

    return on_message


def on_event(
    app: Celery,
    pattern: str,
    *,
    queue: str,
    engine: Engine,
    consumer: str | None = None,
    exchange: str | None = None,
    max_attempts: int = 5,
    prefetch: int = DEFAULT_PREFETCH,
    single_active_consumer: bool = False,
    inbox_retention_seconds: float = 30 * 86400,
) -> Callable[[Handler], Handler]:
    """Register ``def handler(connection, event)`` for events whose routing key matches
    ``pattern`` (topic syntax), consumed from ``queue`` by ``app``'s ordinary workers.

    Each event runs in one transaction on ``engine`` that also claims it in the inbox (as
    ``consumer``, default: the queue's name), and is acknowledged after the commit; see
    :mod:`relay.consumer` for retries and dead letters. ``exchange`` defaults to
    ``RELAY_EXCHANGE``. ``single_active_consumer`` (RabbitMQ) lets one worker at a time take
    the queue, so events are handled in the order they were published. The first call adds the
    consumer bootstep and a beat entry that purges inbox rows older than
    ``inbox_retention_seconds``, hourly.
    """
    registry = _EVENT_QUEUES.get(app)
    if registry is None:
        name = exchange or Settings.from_env(only={"exchange"}).exchange
        registry = _EVENT_QUEUES[app] = _EventQueues(name, prefetch)
        app.steps["consumer"].add(EventConsumerStep)
        _install_inbox_purge(app, registry, inbox_retention_seconds)
    handlers = registry.queues.get(queue)
    if handlers is None:
        handlers = registry.queues[queue] = QueueHandlers(
            queue,
            engine,
            consumer=consumer or queue,
            max_attempts=max_attempts,
            single_active_consumer=single_active_consumer,
        )
    elif handlers.engine is not engine:
        raise ValueError(f"queue {queue!r} already has handlers on another engine")

    def register(handler: Handler) -> Handler:
        handlers.add(pattern, handler)
        return handler

    return register


def _install_inbox_purge(app: Celery, registry: _EventQueues, retention: float) -> None:
    @app.task(name=PURGE_INBOX, shared=False, ignore_result=True)
    def purge_inbox() -> int:
        """Delete inbox rows past the retention, in short transactions, on every engine."""
        deleted = 0
        for engine in {id(h.engine): h.engine for h in registry.queues.values()}.values():
            while True:
                with engine.begin() as conn:
                    n = inbox.purge(conn, retention, batch_size=PURGE_BATCH_SIZE)
                deleted += n
                if n < PURGE_BATCH_SIZE:
                    break
        log.info("purged %d inbox rows older than %gs", deleted, retention)
        return deleted

    app.add_periodic_task(3600.0, purge_inbox.signature(), name=PURGE_INBOX, expires=3600.0)


__all__ = [
    "EventConsumerStep",
    "Runtime",
    "TransactionalTask",
    "Waker",
    "app",
    "celery_config",
    "create_app",
    "enable_wakeup",
    "install",
    "on_event",
    "send_task",
]
