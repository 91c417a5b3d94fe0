"""An event as a NATS message (docs/brokers.md): the relay's message carried the NATS way; pure.

The message is :func:`relay.publishers.message.prepare`'s (the same body, contract headers and
event id), with three changes the NATS side asks for:

- the subject is ``<exchange>.<event_type>`` (the stream captures ``<exchange>.>``);
- ``Nats-Msg-Id`` is the event id: JetStream remembers it for the stream's duplicate window
  and answers a second publish of it with ``duplicate: true``, storing nothing, so a batch
  published again after a crash adds no message;
- the CloudEvents attributes are headers named ``ce-<attribute>``, and ``datacontenttype`` is
  ``Content-Type``: the binary content mode of the CloudEvents NATS protocol binding.

NATS headers are lines of text: a header value that is not a string is sent as its JSON text
(``outbox_id: 42``, ``attempt: 1``); a header name with a colon or white space, a value with a
line break, or an event type that is no valid subject token is the row's fault
(:class:`~relay.exceptions.EventUnsendable`), found before anything is sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from relay.exceptions import EventUnsendable
from relay.publishers import message

#: The header JetStream deduplicates on.
MSG_ID = "Nats-Msg-Id"
#: The NATS binding's prefix of a CloudEvents attribute header.
CE_PREFIX = "ce-"
CONTENT_TYPE = "Content-Type"
#: What a header block costs besides its lines: ``NATS/1.0\r\n`` and the closing ``\r\n``.
_HEADER_FRAME = 12
_NOT_IN_NAME = frozenset(": \t\r\n")


@dataclass(frozen=True, slots=True)
class NatsMessage:
    """Everything a JetStream publish needs for one event."""

    subject: str
    body: bytes
    headers: dict[str, str]

    @property
    def size(self) -> int:
        """Bytes the server counts against ``max_payload``: the header block and the body."""
        lines = sum(len(k.encode()) + len(v.encode()) + 4 for k, v in self.headers.items())
        return len(self.body) + lines + _HEADER_FRAME


def subject_of(exchange: str, event_type: str) -> str:
    """The subject of an event type, or EventUnsendable when it is not one a publish may use:
    every dot-separated token non-empty, no white space, no wildcard (``*``, ``>``)."""
    name = f"{exchange}.{event_type}"
    tokens = name.split(".")
    if any(not t or t in ("*", ">") or any(c.isspace() for c in t) for t in tokens):
        raise EventUnsendable(f"event type {event_type!r} makes no valid NATS subject ({name!r})")
    return name


def from_message(
    msg: message.OutgoingMessage, exchange: str, *, subject: str | None = None
) -> NatsMessage:
    """``msg`` as a NATS message on ``exchange``'s subjects (see the module's docstring), or on
    ``subject`` when given (a replay's, checked by its caller).

    A Celery task row (``relay.celery.send_task``) has no place in a stream: it is refused as
    the row's fault, since a task goes to a Celery broker."""
    if msg.exchange is not None:
        raise EventUnsendable("a Celery task row cannot be published to NATS JetStream")
    headers: dict[str, str] = {}
    for name, value in msg.headers.items():
        if name.startswith(message.CE_PREFIX):
            name = CE_PREFIX + name[len(message.CE_PREFIX) :]
        if not name or _NOT_IN_NAME & set(name):
            raise EventUnsendable(f"header name {name!r} cannot be a NATS header")
        headers[name] = _text(name, value)
    headers[CONTENT_TYPE] = message.CONTENT_TYPE
    headers[MSG_ID] = msg.message_id
    to = subject if subject is not None else subject_of(exchange, msg.routing_key)
    return NatsMessage(to, msg.body, headers)


def _text(name: str, value: Any) -> str:
    """A header value as NATS carries it: a string as itself, anything else as JSON text."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if "\r" in text or "\n" in text:
        raise EventUnsendable(f"header {name!r} has a line break, which NATS headers cannot carry")
    return text


@dataclass(slots=True)
class Acks:
    """What the ``PubAck``s of one batch said: the stream, its sequence numbers, and how many
    were duplicates (an id the stream already held: stored once, acknowledged again)."""

    stream: str | None = None
    first: int | None = None
    last: int | None = None
    count: int = 0
    duplicates: int = 0

    def add(self, ack: Any) -> None:
        self.count += 1
        self.stream = self.stream or getattr(ack, "stream", None)
        seq = getattr(ack, "seq", None)
        if isinstance(seq, int):
            self.first = seq if self.first is None else min(self.first, seq)
            self.last = seq if self.last is None else max(self.last, seq)
        if getattr(ack, "duplicate", False):
            self.duplicates += 1

    def span(self) -> str:
        """``first-last`` (``-`` when no ack carried a sequence)."""
        return "-" if self.first is None else f"{self.first}-{self.last}"
