"""The message on the wire (DESIGN.md §1.3), built from a claimed row; pure."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from relay.records import ClaimedEvent

CONTENT_TYPE = "application/json"
CONTENT_ENCODING = "utf-8"
#: Header names the relay sets; enqueue() refuses them in the caller's headers.
RESERVED_HEADERS = frozenset(
    {"outbox_id", "event_type", "attempt", "created_at", "ordering_key", "ordering_seq"}
)
PERSISTENT = 2


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """Everything a transport needs to publish one event."""

    outbox_id: int
    routing_key: str
    body: bytes
    headers: dict[str, Any]
    message_id: str


def properties(msg: OutgoingMessage) -> dict[str, Any]:
    """The message properties of the contract, as Kombu ``publish`` keyword arguments."""
    return {
        "content_type": CONTENT_TYPE,
        "content_encoding": CONTENT_ENCODING,
        "headers": msg.headers,
        "delivery_mode": PERSISTENT,
        "message_id": msg.message_id,
    }


def encode_body(payload: Any) -> bytes:
    """The payload as compact UTF-8 JSON; NaN and Infinity are not JSON and are refused."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def build(event: ClaimedEvent) -> OutgoingMessage:
    """The message for ``event``: routing key = event_type, message_id = the outbox id."""
    headers: dict[str, Any] = dict(event.headers or {})
    headers.update(
        outbox_id=event.id,
        event_type=event.event_type,
        attempt=event.attempt,
        created_at=event.created_at.isoformat(),
    )
    if event.seq is not None:
        # A consumer that applies a key's messages only at ordering_seq == last applied + 1
        # sees each key in commit order even across redeliveries (docs/ordering.md).
        headers.update(ordering_key=event.ordering_key, ordering_seq=event.seq)
    return OutgoingMessage(
        outbox_id=event.id,
        routing_key=event.event_type,
        body=encode_body(event.payload),
        headers=headers,
        message_id=str(event.id),
    )
