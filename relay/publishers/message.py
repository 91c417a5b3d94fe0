"""The message on the wire (docs/consuming.md, "The message"), built from a claimed row; pure.

An event is a CloudEvent in the binary content mode of the CloudEvents AMQP protocol binding:
the payload is the body, the ``content_type`` property is ``datacontenttype``, and each other
attribute is a header named ``cloudEvents:<attribute>`` (the binding's application-properties,
which AMQP 0-9-1 carries as headers; RabbitMQ hands them to AMQP 1.0 clients as such). The
binding spells the prefix ``cloudEvents:``; ``cloudEvents_`` is an older alternative its
receivers also accept. ``id`` is the event id, the same as ``message_id``; ``time`` is the
row's ``created_at``, RFC 3339 text (the binding's canonical string form).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from relay import records
from relay.exceptions import EventUnsendable
from relay.publishers import signatures
from relay.publishers.signatures import Keyring
from relay.records import ClaimedEvent

CONTENT_TYPE = "application/json"
CONTENT_ENCODING = "utf-8"
#: CloudEvents attributes as headers (the AMQP binding's application-property names).
CE_PREFIX = "cloudEvents:"
CE_ID = CE_PREFIX + "id"
CE_SOURCE = CE_PREFIX + "source"
CE_TYPE = CE_PREFIX + "type"
CE_TIME = CE_PREFIX + "time"
CE_SPECVERSION = CE_PREFIX + "specversion"
SPECVERSION = "1.0"
#: The ``source`` of a row claimed without one (a store always sets it).
DEFAULT_SOURCE = "/relay"
#: The header that marks a replayed message (``relay replay``); its value is the replay's id.
REPLAY_HEADER = "x-relay-replay"
#: Header names the relay sets; enqueue() refuses them in the caller's headers.
RESERVED_HEADERS = frozenset(
    {"outbox_id", "event_type", "attempt", "created_at", "ordering_key", "ordering_seq"}
) | {
    "x-relay-task",
    REPLAY_HEADER,
    CE_ID,
    CE_SOURCE,
    CE_TYPE,
    CE_TIME,
    CE_SPECVERSION,
    signatures.HEADER,
}
#: The row header that makes a row a Celery task (``relay.celery.send_task``): where to publish
#: it and the protocol-2 headers and properties, resolved at enqueue. Never sent as a header.
TASK_HEADER = records.TASK_HEADER
PERSISTENT = 2


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """Everything a transport needs to publish one event."""

    outbox_id: int
    routing_key: str
    body: bytes
    headers: dict[str, Any]
    message_id: str
    #: Where a Celery task goes (None: the relay's exchange, as for every event).
    exchange: str | None = None
    #: A task's extra AMQP properties (``correlation_id``, ``reply_to``, ``priority``).
    extra: dict[str, Any] | None = None
    #: A task's queue, declared before the first publish as ``app.send_task`` declares it:
    #: ``{"queue", "exchange", "exchange_type", "routing_key", "durable", "arguments"}``.
    declare: dict[str, Any] | None = None


def properties(msg: OutgoingMessage) -> dict[str, Any]:
    """The message properties of the contract, as Kombu ``publish`` keyword arguments."""
    return {
        "content_type": CONTENT_TYPE,
        "content_encoding": CONTENT_ENCODING,
        "headers": msg.headers,
        "delivery_mode": PERSISTENT,
        "message_id": msg.message_id,
        **(msg.extra or {}),
    }


#: One encoder for every body: ``json.dumps`` with options builds a new one per call.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_body(payload: Any) -> bytes:
    """The payload as compact UTF-8 JSON; NaN and Infinity are not JSON and are refused."""
    return _JSON.encode(payload).encode()


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _claimed_encoder() -> Callable[[Any], bytes]:
    """:func:`encode_body` for payloads decoded from the outbox, which JSON already holds: the
    C encoder ``JSONEncoder.encode`` builds on every call, built once (1.5 against 2.4 µs a
    message). Without a check for circular references, which decoded JSON cannot have. The
    same bytes (``tests/unit/test_message.py``); where the C encoder is missing, or is built
    differently, :func:`encode_body` itself."""
    make: Any = getattr(json.encoder, "c_make_encoder", None)
    escape = getattr(json.encoder, "c_encode_basestring", None)
    try:
        iterencode = make(None, _refuse, escape, None, ":", ",", False, False, False)
    except TypeError:  # None, or another signature
        return encode_body

    def encode(payload: Any) -> bytes:
        return "".join(iterencode(payload, 0)).encode()

    return encode


#: Encodes a claimed event's payload (see :func:`_claimed_encoder`).
encode_claimed = _claimed_encoder()


def build(event: ClaimedEvent) -> OutgoingMessage:
    """The message for ``event``: routing key = event_type, message_id = the event id (the
    outbox id for a row sent before event ids, as its first message had it), and the
    CloudEvents attributes beside the relay's own headers, which consumers already read."""
    if event.headers and TASK_HEADER in event.headers:
        return build_task(event)
    message_id = event.event_id or str(event.id)
    created_at = event.created_at.isoformat()
    headers: dict[str, Any] = dict(event.headers or {})
    headers.update(
        outbox_id=event.id,
        event_type=event.event_type,
        attempt=event.attempt,
        created_at=created_at,
    )
    headers[CE_SPECVERSION] = SPECVERSION
    headers[CE_ID] = message_id
    headers[CE_SOURCE] = event.source or DEFAULT_SOURCE
    headers[CE_TYPE] = event.event_type
    headers[CE_TIME] = created_at
    if event.seq is not None:
        # A consumer that applies a key's messages only at ordering_seq == last applied + 1
        # sees each key in commit order even across redeliveries (docs/ordering.md).
        headers.update(ordering_key=event.ordering_key, ordering_seq=event.seq)
    return OutgoingMessage(
        outbox_id=event.id,
        routing_key=event.event_type,
        body=encode_claimed(event.payload),
        headers=headers,
        message_id=message_id,
    )


def prepare(event: ClaimedEvent, keyring: Keyring | None = None) -> OutgoingMessage:
    """:func:`build`, where whatever the row holds that makes building fail is the row's fault:
    :class:`~relay.exceptions.EventUnsendable` naming it, never another exception (a payload
    with a number JSON has no text for, a value nested too deep to encode, ...). With a
    ``keyring`` an event (not a Celery task) carries its signature
    (:mod:`relay.publishers.signatures`)."""
    try:
        msg = build(event)
        if keyring is not None and not (event.headers and TASK_HEADER in event.headers):
            msg.headers[signatures.HEADER] = keyring.sign(
                msg.message_id, msg.routing_key, msg.headers, msg.body
            )
        return msg
    except RecursionError as exc:
        raise EventUnsendable("payload or headers nested too deep to encode") from exc
    except Exception as exc:
        raise EventUnsendable(f"cannot be encoded: {type(exc).__name__}: {exc}") from exc


def build_task(event: ClaimedEvent) -> OutgoingMessage:
    """A Celery protocol-2 task message: the route, headers and properties resolved at enqueue
    (``relay.celery.send_task``), the same task id on every attempt; body = ``[args, kwargs,
    embed]``. The relay's ``outbox_id`` and ``attempt`` headers ride along (a task sees them
    in ``self.request``)."""
    user = dict(event.headers or {})
    task = user.pop(TASK_HEADER)
    headers = {**user, **task["headers"], "outbox_id": event.id, "attempt": event.attempt}
    return OutgoingMessage(
        outbox_id=event.id,
        routing_key=task["routing_key"],
        body=encode_claimed(event.payload),
        headers=headers,
        message_id=str(event.id),
        exchange=task["exchange"],
        extra=dict(task.get("properties") or {}),
        declare=task.get("declare"),
    )


def to_queue(msg: OutgoingMessage, queue: str, replay_id: str) -> OutgoingMessage:
    """``msg`` replayed to ``queue`` alone: the default exchange with the queue as routing key,
    the same body, ``message_id`` and headers, plus :data:`REPLAY_HEADER` = ``replay_id``. A
    Celery task row keeps its task id and protocol headers; only its route changes."""
    return replace(
        msg,
        routing_key=queue,
        exchange="",
        headers={**msg.headers, REPLAY_HEADER: replay_id},
        declare=None,
    )


def task_expires(event: ClaimedEvent) -> str | None:
    """The ISO 8601 ``expires`` of a task row (None for an event or a task without one)."""
    task = (event.headers or {}).get(TASK_HEADER)
    return None if task is None else task["headers"].get("expires")
