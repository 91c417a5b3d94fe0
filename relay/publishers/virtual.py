"""Publishing on Kombu's virtual transports (Redis, the embedded filesystem one, memory).

They have no publisher confirms: a publish that returned without error is the confirmation.
The exchange's bindings are read once per batch (Kombu would read them for every message) and
an event no queue is bound to is refused, as a mandatory publish would be on RabbitMQ. On Redis
the LPUSHes of a batch go out pipelined.
"""

from __future__ import annotations

from typing import Any

import kombu
from kombu.utils import json as kombu_json

from relay.exceptions import EventUnsendable
from relay.ordering import RunGuard
from relay.publishers import message
from relay.publishers.kombu_connection import (
    KombuPublisher,
    kombu_message,
    publishable,
    unroutable,
)
from relay.records import ClaimedEvent, PublishResult

_REDIS_TRANSPORTS = frozenset({"redis", "rediss"})
#: Messages per Redis pipeline: one round trip each, without building huge replies.
_REDIS_PIPELINE_CHUNK = 1000


class VirtualPublisher(KombuPublisher):
    """Publishes on a virtual transport's channel: a publish that returned is confirmed."""

    def _publish_batch(self, events: list[ClaimedEvent], result: PublishResult) -> None:
        assert self._conn is not None
        channel, exchange = self._channel, self.exchange
        name = exchange.name
        table = channel.get_table(name)
        kind = channel.typeof(name)
        routes: dict[str, list[str]] = {}
        ready: list[tuple[ClaimedEvent, message.OutgoingMessage, list[str]]] = []
        guard = RunGuard()  # a row refused here withholds what follows it (relay.ordering)
        tasks: list[tuple[ClaimedEvent, message.OutgoingMessage]] = []
        for event, msg in publishable(events, result, guard, self._checked):
            if msg.exchange is not None:  # a Celery task: its own route, declared first
                self._declare_route(msg)
                tasks.append((event, msg))
                continue
            queues = routes.get(msg.routing_key)
            if queues is None:
                found = kind.lookup(table, name, msg.routing_key, None) or ()
                queues = routes[msg.routing_key] = sorted(
                    q for q in found if q and q != channel.deadletter_queue
                )
            if queues:
                ready.append((event, msg, queues))
            else:
                result.rejected.append((event, unroutable(msg.routing_key, name)))
                guard.failed(event)
        for event, msg in tasks:
            task_exchange = kombu.Exchange(msg.exchange or "")
            kombu.Producer(channel, exchange=task_exchange, auto_declare=False).publish(
                msg.body, routing_key=msg.routing_key, retry=False, **message.properties(msg)
            )
            result.confirmed.append(event)
        if self._conn.transport_cls in _REDIS_TRANSPORTS:
            _push_redis(channel, exchange, ready, result)
            return
        producer = kombu.Producer(channel, exchange=exchange, auto_declare=False)
        for event, msg, _ in ready:
            producer.publish(
                msg.body, routing_key=msg.routing_key, retry=False, **message.properties(msg)
            )
            result.confirmed.append(event)

    def _checked(self, event: ClaimedEvent) -> message.OutgoingMessage:
        """``event``'s message, its own headers (if it has any) checked as JSON will carry them."""
        msg = self._prepare(event)
        if event.headers:
            _check_headers(msg)
        return msg


def _check_headers(msg: message.OutgoingMessage) -> None:
    """A virtual transport carries headers as JSON: a row's own headers that JSON cannot carry
    (nested too deep, a number with no JSON text) are the row's fault, found before publishing."""
    try:
        kombu_json.dumps(msg.headers)
    except RecursionError as exc:
        raise EventUnsendable("headers nested too deep to encode") from exc
    except (TypeError, ValueError) as exc:
        raise EventUnsendable(f"headers cannot be encoded: {exc}") from exc


def _push_redis(
    channel: Any,
    exchange: kombu.Exchange,
    ready: list[tuple[ClaimedEvent, message.OutgoingMessage, list[str]]],
    result: PublishResult,
) -> None:
    """LPUSH each message to its bound queues, pipelined: one round trip per chunk.

    The message is built by the channel's own ``prepare_message`` and augmented as its
    ``basic_publish`` would (base64 body, delivery info), so any Kombu consumer reads it as
    if Kombu had published it; a test compares the two byte for byte.
    """
    name = exchange.name
    expires: dict[str, int] = channel._expires or {}
    with channel.conn_or_acquire() as client:
        for start in range(0, len(ready), _REDIS_PIPELINE_CHUNK):
            chunk = ready[start : start + _REDIS_PIPELINE_CHUNK]
            pipe = client.pipeline(transaction=False)
            for _, msg, queues in chunk:
                raw = kombu_message(channel, msg)
                channel._inplace_augment_message(raw, name, msg.routing_key)
                payload = kombu_json.dumps(raw)
                priority = channel._get_message_priority(raw, reverse=False)
                for queue in queues:
                    pipe.lpush(channel._q_for_pri(queue, priority), payload)
                    if queue in expires:
                        for step in channel.priority_steps:
                            pipe.pexpire(channel._q_for_pri(queue, step), expires[queue])
            pipe.execute()
            # Executed chunks are in Redis even if a later chunk fails: the caller retries
            # only what is not confirmed.
            result.confirmed.extend(event for event, _, _ in chunk)
