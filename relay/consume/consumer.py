"""Consuming the relay's events: each handler takes effect once, in the consumer's transaction.

One :class:`QueueHandlers` serves one queue bound to ``RELAY_EXCHANGE``: its handlers by routing
pattern, the inbox name (``consumer``, the queue's name unless given) and the engine. For each
message it opens one transaction, claims the message id in the inbox
(``relay.consume.inbox.claim``), runs every matching handler, commits, and only then acknowledges.
A duplicate is acknowledged without running anything.

A handler that raises rolls its transaction back and is retried in place, with full-jitter
backoff, up to ``max_attempts``; the queue waits meanwhile, which keeps a key's events in order.
After the last attempt the message goes to the dead-letter queue ``<queue>.dead`` (published
with confirms on RabbitMQ, before the original is acknowledged), headers ``x-relay-error``,
``x-relay-consumer`` and ``x-relay-attempts`` saying why; the queue moves on. ``relay inbox
dead QUEUE`` lists them and ``relay inbox redrive QUEUE`` puts them back on the queue.

A database that cannot be reached is not the event's fault: the message is requeued without
dead-lettering, after the same backoff.

The Celery worker runs these through ``relay.celery.on_event``; :class:`EventConsumer` is the
same without Celery.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import kombu
from sqlalchemy import Connection, Engine
from sqlalchemy import exc as sa_exc

from relay.consume import inbox
from relay.consume.deadletters import DeadLetters, dead_queue_name
from relay.observe import tracing
from relay.policy import backoff_seconds
from relay.publishers import transports
from relay.publishers.signatures import Keyring

log = logging.getLogger(__name__)

#: Messages a consumer holds unacknowledged at once: bounded, so a slow handler never hoards.
DEFAULT_PREFETCH = 16


@dataclass(frozen=True, slots=True)
class Event:
    """One event as a handler receives it."""

    #: The event id, unique across outboxes: the message's ``message_id`` (the inbox key).
    id: str
    #: The routing key.
    event_type: str
    payload: Any
    headers: dict[str, Any]
    #: The relay's attempt that published it (1 = first try).
    attempt: int
    #: The outbox it came from (the CloudEvents ``source``); None on a message without one.
    source: str | None = None


#: ``def handle(connection, event)``: ``connection`` is inside the transaction that also holds
#: the inbox claim; raise to roll back and retry.
Handler = Callable[[Connection, Event], None]


def topic_matches(pattern: str, routing_key: str) -> bool:
    """AMQP topic matching: words split on ``.``, ``*`` is one word, ``#`` zero or more."""
    return _match(pattern.split("."), routing_key.split("."))


def _match(pattern: Sequence[str], words: Sequence[str]) -> bool:
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(_match(rest, words[i:]) for i in range(len(words) + 1))
    return bool(words) and head in ("*", words[0]) and _match(rest, words[1:])


@dataclass
class QueueHandlers:
    """The handlers of one queue and how one of its messages is processed."""

    queue: str
    engine: Engine
    consumer: str = ""
    max_attempts: int = 5
    backoff_base_seconds: float = 0.2
    backoff_max_seconds: float = 5.0
    #: RabbitMQ's single active consumer: one consumer at a time gets the queue's messages, in
    #: queue order, so a key's events are handled in the order the relay published them.
    single_active_consumer: bool = False
    routes: list[tuple[str, Handler]] = field(default_factory=list)
    #: Verifies every message's signature (``RELAY_SIGNING_KEYS``): one without a valid one is
    #: dead-lettered unhandled. None: signatures are not checked.
    keyring: Keyring | None = None
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self.consumer = self.consumer or self.queue
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")

    def add(self, pattern: str, handler: Handler) -> None:
        self.routes.append((pattern, handler))

    @property
    def patterns(self) -> list[str]:
        return sorted({pattern for pattern, _ in self.routes})

    def declare(self, channel: Any, exchange: str) -> kombu.Queue:
        """The durable queue bound to ``exchange`` with every pattern, and its dead letters."""
        ex = kombu.Exchange(exchange, type="topic", durable=True)
        bindings = [kombu.binding(ex, routing_key=p) for p in self.patterns]
        arguments = {"x-single-active-consumer": True} if self.single_active_consumer else None
        queue = kombu.Queue(self.queue, bindings=bindings, durable=True, queue_arguments=arguments)(
            channel
        )
        queue.declare()
        kombu.Queue(dead_queue_name(self.queue), durable=True)(channel).declare()
        return queue

    def on_message(self, message: Any, dead: DeadLetters) -> str:
        """Process ``message`` and settle it; returns ``done``, ``duplicate``, ``dead``,
        ``ignored`` or ``requeued``. Traced (a CONSUMER span) when the message carries a trace
        context and OpenTelemetry is installed (:func:`relay.observe.tracing.consuming`)."""
        with tracing.consuming(message, self.queue) as note:
            outcome = self._handle(message, dead)
            note(outcome)
            return outcome

    def _handle(self, message: Any, dead: DeadLetters) -> str:
        try:
            event = decode(message)
        except ValueError as exc:
            dead.publish(message, f"undecodable: {exc}", self.consumer, attempts=0)
            message.ack()
            return "dead"
        if self.keyring is not None:
            # The event_type header, as published: a re-driven dead letter arrives with the
            # queue's name as its routing key.
            try:
                refused = self.keyring.verify(
                    event.id, event.event_type, event.headers, message.body
                )
            except Exception as exc:  # a body or header no signature could cover
                refused = f"unverifiable: {type(exc).__name__}: {exc}"
            if refused is not None:
                log.warning("%s: event %s refused: %s", self.queue, event.id, refused)
                dead.publish(message, f"signature: {refused}", self.consumer, attempts=0)
                message.ack()
                return "dead"
        handlers = [h for p, h in self.routes if topic_matches(p, event.event_type)]
        if not handlers:
            log.warning("no handler of %s matches %r; acknowledged", self.queue, event.event_type)
            message.ack()
            return "ignored"
        error = ""
        for attempt in range(1, self.max_attempts + 1):
            try:
                outcome = self._once(event, handlers)
            except (sa_exc.OperationalError, sa_exc.InterfaceError) as exc:
                # The database, not the event: requeue it for later, never dead-letter it.
                log.warning("database unavailable for %s: %s; requeued", self.queue, exc)
                self.sleep(self._backoff(attempt))
                message.requeue()
                return "requeued"
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "handler of %s failed on %s (attempt %d): %s",
                    self.queue,
                    event.id,
                    attempt,
                    error,
                )
                if attempt < self.max_attempts:
                    self.sleep(self._backoff(attempt))
                continue
            message.ack()
            return outcome
        dead.publish(message, error, self.consumer, attempts=self.max_attempts)
        message.ack()
        return "dead"

    def _once(self, event: Event, handlers: list[Handler]) -> str:
        with self.engine.begin() as conn:
            if not inbox.claim(conn, self.consumer, event.id):
                return "duplicate"
            for handler in handlers:
                handler(conn, event)
        return "done"

    def _backoff(self, attempt: int) -> float:
        return backoff_seconds(
            attempt, base=self.backoff_base_seconds, cap=self.backoff_max_seconds, rng=self.rng
        )


def decode(message: Any) -> Event:
    """The :class:`Event` of a relay message; ValueError when it is not one."""
    properties = getattr(message, "properties", {}) or {}
    headers = dict(getattr(message, "headers", None) or {})
    # A message of a relay before event ids has only its outbox id (docs/guarantees.md).
    message_id = (
        properties.get("message_id") or headers.get("cloudEvents:id") or headers.get("outbox_id")
    )
    if message_id in (None, ""):
        raise ValueError("no message_id, cloudEvents:id or outbox_id header")
    try:
        payload = json.loads(message.body)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"body is not JSON ({exc})") from None
    routing_key = headers.get("event_type") or message.delivery_info.get("routing_key", "")
    return Event(
        id=str(message_id),
        event_type=str(routing_key),
        payload=payload,
        headers=headers,
        attempt=int(headers.get("attempt") or 1),
        source=headers.get("cloudEvents:source"),
    )


class EventConsumer:
    """The same handling in a plain Kombu process (no Celery): ``run(stop)`` until ``stop``."""

    def __init__(
        self,
        url: str,
        exchange: str,
        handlers: QueueHandlers,
        *,
        prefetch: int = DEFAULT_PREFETCH,
        transport_options: dict[str, Any] | None = None,
    ) -> None:
        self.url, self.exchange, self.handlers, self.prefetch = url, exchange, handlers, prefetch
        self.transport_options = transport_options or {}
        self.counts: dict[str, int] = {}

    def run(self, stop: threading.Event, *, poll_seconds: float = 0.5) -> dict[str, int]:
        """Consume until ``stop`` is set; reconnects after a broker failure."""
        while not stop.is_set():
            try:
                self._consume(stop, poll_seconds)
            except kombu.exceptions.OperationalError as exc:  # broker gone: try again
                log.warning("event consumer lost the broker: %s; reconnecting", exc)
                stop.wait(1.0)
        return self.counts

    def _consume(self, stop: threading.Event, poll_seconds: float) -> None:
        with transports.kombu_connection(
            self.url, transport_options=self.transport_options
        ) as conn:
            channel, dead_channel = conn.channel(), conn.channel()
            queue = self.handlers.declare(channel, self.exchange)
            dead = DeadLetters(dead_channel, self.handlers.queue)

            def handle(message: Any) -> None:
                outcome = self.handlers.on_message(message, dead)
                self.counts[outcome] = self.counts.get(outcome, 0) + 1

            # on_message: the raw message, so a body that is not JSON is dead-lettered by the
            # handlers instead of failing inside Kombu's decoding.
            with kombu.Consumer(
                channel, [queue], on_message=handle, accept=["json"], prefetch_count=self.prefetch
            ):
                while not stop.is_set():
                    try:
                        conn.drain_events(timeout=poll_seconds)
                    except TimeoutError:
                        continue


__all__ = ["Event", "EventConsumer", "Handler", "QueueHandlers", "decode", "topic_matches"]
