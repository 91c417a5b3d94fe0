"""Dead letters of event consumers: the ``<queue>.dead`` queue beside each event queue.

A message lands there after its handler failed ``max_attempts`` times (see
:mod:`relay.consume.consumer`), with headers saying why. Operators list them and put them back
(``relay inbox dead QUEUE``, ``relay inbox redrive QUEUE``); a re-driven message keeps its
``message_id``, so the inbox still recognises one that was processed meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import kombu

DEAD_SUFFIX = ".dead"
#: Headers a dead letter carries beside the original ones.
ERROR, CONSUMER, ATTEMPTS, ROUTING_KEY = (
    "x-relay-error",
    "x-relay-consumer",
    "x-relay-attempts",
    "x-relay-routing-key",
)


def dead_queue_name(queue: str) -> str:
    return queue + DEAD_SUFFIX


class DeadLetters:
    """Publishes a copy of a message to ``<queue>.dead``; with broker confirms on RabbitMQ."""

    def __init__(self, channel: Any, queue: str) -> None:
        self.routing_key = dead_queue_name(queue)
        # py-amqp: a publish on this channel returns only once the broker confirmed it.
        confirm = getattr(channel, "basic_publish_confirm", None)
        if confirm is not None:
            channel.basic_publish = confirm
        self.producer = kombu.Producer(
            channel, exchange=kombu.Exchange(""), routing_key=self.routing_key
        )

    def publish(self, message: Any, error: str, consumer: str, *, attempts: int) -> None:
        properties = getattr(message, "properties", {}) or {}
        headers = dict(getattr(message, "headers", None) or {})
        headers.update(
            {
                ERROR: error[:2000],
                CONSUMER: consumer,
                ATTEMPTS: attempts,
                ROUTING_KEY: message.delivery_info.get("routing_key", ""),
            }
        )
        _copy(self.producer, message, self.routing_key, headers, properties)


def _copy(
    producer: kombu.Producer,
    message: Any,
    routing_key: str,
    headers: dict[str, Any],
    properties: dict[str, Any],
) -> None:
    producer.publish(
        message.body,
        routing_key=routing_key,
        headers=headers,
        content_type=message.content_type or "application/json",
        content_encoding=message.content_encoding or "utf-8",
        delivery_mode=2,
        message_id=properties.get("message_id"),
        serializer=None,
    )


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead letter as an operator sees it."""

    message_id: str
    routing_key: str
    consumer: str
    attempts: int
    error: str


def peek(conn: kombu.Connection, queue: str, limit: int) -> list[DeadLetter]:
    """Up to ``limit`` dead letters of ``queue``, left in place (taken, then requeued)."""
    held: list[Any] = []
    seen: list[DeadLetter] = []
    dead = kombu.Queue(dead_queue_name(queue), durable=True)(conn.channel())
    dead.declare()
    try:
        while len(held) < limit:
            message = dead.get(no_ack=False)
            if message is None:
                break
            held.append(message)
            h = message.headers or {}
            seen.append(
                DeadLetter(
                    message_id=str((message.properties or {}).get("message_id", "")),
                    routing_key=str(h.get(ROUTING_KEY, "")),
                    consumer=str(h.get(CONSUMER, "")),
                    attempts=int(h.get(ATTEMPTS) or 0),
                    error=str(h.get(ERROR, "")),
                )
            )
    finally:
        for message in held:
            message.requeue()
    return seen


def redrive(conn: kombu.Connection, queue: str, limit: int) -> int:
    """Move up to ``limit`` dead letters of ``queue`` back onto it (each published, confirmed
    on RabbitMQ, before it leaves the dead queue); returns how many moved."""
    moved = 0
    channel = conn.channel()
    dead = kombu.Queue(dead_queue_name(queue), durable=True)(channel)
    dead.declare()
    republish = DeadLetters(conn.channel(), queue)
    while moved < limit:
        message = dead.get(no_ack=False)
        if message is None:
            break
        headers = {k: v for k, v in (message.headers or {}).items() if not k.startswith("x-relay-")}
        _copy(republish.producer, message, queue, headers, message.properties or {})
        message.ack()
        moved += 1
    return moved


__all__ = ["DeadLetter", "DeadLetters", "dead_queue_name", "peek", "redrive"]
