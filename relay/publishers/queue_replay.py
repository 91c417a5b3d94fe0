"""Publishing a replay: sent events again, to one existing queue alone (``relay replay``).

A replayed message goes to the broker's default exchange with the queue's name as routing key,
so no other queue bound to the relay's exchange sees a copy; it is the original message
(:func:`relay.publishers.message.build`) plus the replay header
(:func:`relay.publishers.message.to_queue`), published by the same publishers as live delivery,
with publisher confirms on RabbitMQ and ``mandatory`` set (a queue deleted mid-replay turns its
messages into returns, never into silence).

The queue must exist before anything is sent (:func:`check_queue`): on AMQP a passive
``queue.declare``; on Kombu's virtual transports (Redis, the embedded filesystem one), which
keep no record of an empty queue, a queue exists when it is bound to the relay's exchange (a
consumer of the relay's events declared it) or holds messages.
"""

from __future__ import annotations

from typing import Any

from relay.exceptions import ReplayRefused
from relay.publishers import AMQP_TRANSPORTS, NATS_SCHEMES, Publisher, message
from relay.publishers.amqp import AmqpPublisher
from relay.publishers.kombu_connection import connection, translated
from relay.publishers.signatures import Keyring
from relay.publishers.virtual import VirtualPublisher
from relay.records import ClaimedEvent


class _ToQueue:
    """Routes each message to one queue through the default exchange, marked as a replay."""

    queue: str
    replay_id: str
    keyring: Keyring | None

    def _prepare(self, event: ClaimedEvent) -> message.OutgoingMessage:
        return message.to_queue(message.prepare(event, self.keyring), self.queue, self.replay_id)


class AmqpReplayPublisher(_ToQueue, AmqpPublisher):
    """:class:`~relay.publishers.amqp.AmqpPublisher` with every message sent to one queue."""

    def __init__(self, url: str, exchange: str, queue: str, replay_id: str, **kw: Any) -> None:
        super().__init__(url, exchange, **kw)
        self.queue, self.replay_id = queue, replay_id


class VirtualReplayPublisher(_ToQueue, VirtualPublisher):
    """:class:`~relay.publishers.virtual.VirtualPublisher` with every message sent to one
    queue (Kombu's virtual default exchange delivers to the queue its routing key names)."""

    def __init__(self, url: str, exchange: str, queue: str, replay_id: str, **kw: Any) -> None:
        super().__init__(url, exchange, **kw)
        self.queue, self.replay_id = queue, replay_id


def for_queue(
    url: str,
    exchange: str,
    queue: str,
    replay_id: str,
    *,
    confirm_timeout: float = 10.0,
    signing_keys: str | None = None,
) -> Publisher:
    """The publisher of replay ``replay_id`` to ``queue`` over ``url``'s transport, signing
    as the relay does when ``signing_keys`` are given."""
    import kombu

    from relay.publishers import transports

    transports.register()
    kind = (
        AmqpReplayPublisher
        if kombu.Connection(transports.broker_tls(url)[0]).transport_cls in AMQP_TRANSPORTS
        else VirtualReplayPublisher
    )
    publisher = kind(url, exchange, queue, replay_id, confirm_timeout=confirm_timeout)
    publisher.keyring = Keyring.from_text(signing_keys)
    return publisher


def check_queue(url: str, exchange: str, queue: str, *, timeout: float = 10.0) -> None:
    """Refuse (:class:`~relay.exceptions.ReplayRefused`) a ``queue`` that does not exist on the
    broker at ``url``; :class:`~relay.exceptions.BrokerUnavailable` if it cannot be asked."""
    if not queue.strip():
        raise ReplayRefused("--to-queue: a replay needs the name of an existing queue")
    if url.partition("://")[0].lower() in NATS_SCHEMES:
        raise ReplayRefused(
            "--to-queue: NATS JetStream has no queues; replay to a subject a stream captures "
            "with --to-subject (docs/brokers.md); nothing was sent"
        )
    if len(queue.encode()) > 255:
        raise ReplayRefused(f"--to-queue: {queue[:40]!r}… is over the 255 bytes of a queue name")
    with (
        connection(url, timeout=max(1, round(timeout))) as conn,
        translated(conn, "broker unavailable"),
    ):
        channel: Any = conn.channel()
        try:
            if conn.transport_cls in AMQP_TRANSPORTS:
                found = _amqp_queue_exists(conn, channel, queue)
            else:
                found = queue in _bound_queues(channel, exchange) or _holds(channel, queue)
        finally:
            _close(channel)
    if not found:
        raise ReplayRefused(
            f"--to-queue: no queue {queue!r} on the events broker; a replay sends only to a "
            "queue that already exists (declared by its consumer); nothing was sent"
        )


def _amqp_queue_exists(conn: Any, channel: Any, queue: str) -> bool:
    import amqp.exceptions

    try:
        channel.queue_declare(queue=queue, passive=True)
    except amqp.exceptions.NotFound:
        return False
    return True


def _bound_queues(channel: Any, exchange: str) -> set[str]:
    try:
        return {q for _, _, q in channel.get_table(exchange)}
    except Exception:  # a virtual transport with no binding table for it: nothing bound
        return set()


def _holds(channel: Any, queue: str) -> bool:
    """Whether a virtual queue has messages (Redis keeps a list only while it holds any; the
    base virtual channel says True for every name, which proves nothing)."""
    if type(channel)._has_queue is _base_has_queue():
        return False
    return bool(channel._has_queue(queue))


def _base_has_queue() -> Any:
    from kombu.transport.virtual import Channel

    return Channel._has_queue


def _close(channel: Any) -> None:
    try:
        channel.close()
    except Exception:  # a channel the broker already closed (a 404 closes it): nothing to do
        return


__all__ = ["AmqpReplayPublisher", "VirtualReplayPublisher", "check_queue", "for_queue"]
