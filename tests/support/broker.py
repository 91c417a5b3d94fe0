"""A consumer for the tests: a queue bound to the test's exchange, drained with a bound."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import kombu

#: Every wait of a test's own AMQP connection has a deadline: a test interrupted mid-read (by its
#: pytest timeout) leaves the connection out of step, and the next method would otherwise wait
#: for its reply for good, in a teardown no timeout covers.
_AMQP_DEADLINES = {"read_timeout": 30, "write_timeout": 30}


def _connection(url: str) -> kombu.Connection:
    amqp = url.split("://")[0] in ("amqp", "amqps", "pyamqp")
    return kombu.Connection(
        url, connect_timeout=5, transport_options=dict(_AMQP_DEADLINES) if amqp else None
    )


@dataclass(frozen=True)
class Received:
    """One message as a consumer sees it."""

    body: Any
    raw_body: bytes
    routing_key: str
    message_id: str
    headers: dict[str, Any]
    properties: dict[str, Any]
    delivery_info: dict[str, Any]
    #: Kombu's view of the content type (a property on AMQP, the envelope's on Redis).
    content_type: str | None = None

    @property
    def outbox_id(self) -> int:
        """The row it came from (``message_id`` is the event id, unique across outboxes)."""
        return int(self.headers["outbox_id"])


class Collector:
    """Binds a durable queue to ``exchange`` with ``binding_key`` and collects what arrives."""

    def __init__(
        self,
        url: str,
        exchange: str,
        binding_key: str = "#",
        queue: str | None = None,
        queue_arguments: dict[str, Any] | None = None,
    ):
        self.url = url
        self.exchange = kombu.Exchange(exchange, type="topic", durable=True)
        self.queue_name = queue or f"{exchange}.q"
        self.conn = _connection(url)
        self.channel = self.conn.channel()
        self.queue = kombu.Queue(
            self.queue_name,
            self.exchange,
            routing_key=binding_key,
            durable=True,
            queue_arguments=queue_arguments,
        )(self.channel)
        self.queue.declare()
        self.received: list[Received] = []

    def drain(self, expected: int, timeout: float = 30.0, settle: float = 0.0) -> list[Received]:
        """Collect until ``expected`` messages arrived (or ``timeout``), then ``settle`` seconds
        more to catch any extra (duplicate) message."""
        deadline = time.monotonic() + timeout
        while len(self.received) < expected and time.monotonic() < deadline:
            if not self._get_one():
                time.sleep(0.02)
        settle_until = time.monotonic() + settle
        while time.monotonic() < settle_until:
            if not self._get_one():
                time.sleep(0.02)
        return self.received

    def _get_one(self) -> bool:
        message = self.queue.get(no_ack=True)
        if message is None:
            return False
        self.received.append(
            Received(
                body=json.loads(message.body),
                raw_body=message.body,
                routing_key=message.delivery_info["routing_key"],
                message_id=message.properties.get("message_id"),
                headers=dict(message.headers or {}),
                properties=dict(message.properties),
                delivery_info=dict(message.delivery_info),
                content_type=message.content_type,
            )
        )
        return True

    def close(self, delete: bool = True) -> None:
        """Delete the queue and the exchange (``delete``) and close the connection; when the
        connection fails at it (left out of step by an interrupted test), give it up and delete
        them over a fresh one."""
        failures: tuple[type[BaseException], ...] = (
            OSError,
            *self.conn.connection_errors,
            *self.conn.channel_errors,
        )
        try:
            if delete:
                self.queue.delete()
                self.exchange(self.channel).delete()
        except failures:
            self.conn.collect()
            remove(self.url, exchange=self.exchange.name, queues=[self.queue_name])
            return
        self.conn.release()


def remove(url: str, *, exchange: str | None = None, queues: Iterable[str] = ()) -> None:
    """Delete a test's queues and exchange from the broker at ``url`` (absent ones included:
    RabbitMQ deletes idempotently), so a run leaves no queue or exchange behind."""
    with _connection(url) as conn, suppress(*conn.channel_errors):
        channel = conn.default_channel
        for name in queues:
            kombu.Queue(name, channel=channel).delete()
        if exchange is not None:
            kombu.Exchange(exchange, channel=channel).delete()
