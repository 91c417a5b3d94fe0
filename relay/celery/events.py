"""Event handlers in the app's own workers: :func:`on_event` registers a handler, and
:class:`EventConsumerStep` consumes its queue inside the worker, each event in one transaction
with its inbox claim (see :mod:`relay.consume.consumer`).
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable
from typing import Any

import kombu
from celery import Celery, bootsteps
from sqlalchemy import Engine

from relay.celery.names import PURGE_INBOX
from relay.config import Settings
from relay.consume import inbox
from relay.consume.consumer import DEFAULT_PREFETCH, Handler, QueueHandlers
from relay.consume.deadletters import DeadLetters
from relay.publishers.signatures import Keyring

log = logging.getLogger(__name__)


class _EventQueues:
    """The event queues ``on_event`` registered on one app, read by the consumer bootstep."""

    def __init__(self, exchange: str, prefetch: int) -> None:
        self.exchange, self.prefetch = exchange, prefetch
        self.queues: dict[str, QueueHandlers] = {}
        #: ``RELAY_SIGNING_KEYS`` of the worker's environment: every queue verifies with it.
        self.keyring: Keyring | None = None


_EVENT_QUEUES: weakref.WeakKeyDictionary[Celery, _EventQueues] = weakref.WeakKeyDictionary()


class EventConsumerStep(bootsteps.ConsumerStep):
    """Declares each event queue (durable, bound to the exchange with its patterns, plus its
    ``.dead`` queue) when the worker's consumer starts, and consumes it with bounded prefetch."""

    #: Fixed rather than derived by Celery from the defining module, so the name that the
    #: worker's blueprint, its logs and other steps' ``requires`` know stays put.
    name = "relay.celery.EventConsumerStep"

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
    :mod:`relay.consume.consumer` for retries and dead letters. ``exchange`` defaults to
    ``RELAY_EXCHANGE``. ``single_active_consumer`` (RabbitMQ) lets one worker at a time take
    the queue, so events are handled in the order they were published. The first call adds the
    consumer bootstep and a beat entry that purges inbox rows older than
    ``inbox_retention_seconds``, hourly. With ``RELAY_SIGNING_KEYS`` set in the worker's
    environment, every event must carry a valid signature: one without is dead-lettered
    unhandled (:mod:`relay.publishers.signatures`).
    """
    registry = _EVENT_QUEUES.get(app)
    if registry is None:
        env = Settings.from_env(only={"exchange", "signing_keys"})
        registry = _EVENT_QUEUES[app] = _EventQueues(exchange or env.exchange, prefetch)
        registry.keyring = Keyring.from_text(env.signing_keys)
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
            keyring=registry.keyring,
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
                    n = inbox.purge(conn, retention)
                deleted += n
                if n < inbox.PURGE_BATCH_SIZE:
                    break
        log.info("purged %d inbox rows older than %gs", deleted, retention)
        return deleted

    app.add_periodic_task(3600.0, purge_inbox.signature(), name=PURGE_INBOX, expires=3600.0)
