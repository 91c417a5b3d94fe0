"""RabbitMQ with publisher confirms (py-amqp through Kombu).

The channel is put in confirm mode and a whole batch is published before its confirms are
awaited; ``mandatory`` turns an unroutable message into a ``basic.return``. RabbitMQ confirms
(or nacks) every message, routable or not, so a batch left without any confirm for
``confirm_timeout`` is the connection's or the broker's fault, never the events'.

The batch's frames are encoded here (:mod:`relay.publishers.frames`) and written with one
socket write; py-amqp, through Kombu, still opens the connection (and negotiates
``frame_max``), declares the exchange, and reads the confirms and returns. A connection the
broker blocks (a resource alarm) stops reading: the write or the confirms then wait, and the
confirm timeout turns that into :class:`~relay.exceptions.BrokerUnavailable`.
"""

from __future__ import annotations

import struct
import time
from typing import Any

import kombu

from relay.exceptions import BrokerUnavailable, EventUnsendable
from relay.ordering import RunGuard
from relay.publishers import message
from relay.publishers.base import KombuPublisher, describe, unroutable
from relay.publishers.frames import BatchEncoder
from relay.records import ClaimedEvent, PublishResult

#: The longest AMQP short string (a routing key, a header name), in bytes.
SHORTSTR_MAX = 255


class AmqpPublisher(KombuPublisher):
    """Publishes a batch on a confirm-mode channel, then awaits the batch's confirms."""

    def __init__(self, url: str, exchange: str, *, confirm_timeout: float = 10.0) -> None:
        super().__init__(url, exchange, confirm_timeout=confirm_timeout)
        self._next_tag = 1
        self._pending: dict[int, ClaimedEvent] = {}
        #: No tag below this is pending: a ``multiple`` confirm settles from here up.
        self._floor = 1
        self._acked: list[ClaimedEvent] = []
        self._nacked: list[ClaimedEvent] = []
        self._returned: dict[str, str] = {}
        self._encoder: BatchEncoder | None = None

    def _setup(self, conn: kombu.Connection, channel: Any) -> None:
        channel.confirm_select()
        channel.events["basic_ack"].add(self._on_ack)
        channel.events["basic_nack"].add(self._on_nack)
        channel.events["basic_return"].add(self._on_return)
        self._next_tag = 1
        amqp_conn: Any = conn.connection
        self._encoder = BatchEncoder(channel.channel_id, self.exchange.name, amqp_conn.frame_max)

    def _publish_batch(self, events: list[ClaimedEvent], result: PublishResult) -> None:
        conn, encoder = self._conn, self._encoder
        assert conn is not None
        assert encoder is not None
        self._pending.clear()
        self._floor = self._next_tag
        self._acked, self._nacked, self._returned = [], [], {}
        guard = RunGuard()  # a row refused here withholds what follows it (relay.ordering)
        frames: list[bytes] = []
        for event in events:
            if guard.stopped and guard.holds(event):
                result.withheld.append(event)
                continue
            try:
                msg = message.prepare(event)
                self._declare_route(msg)
                frames.append(_encode(encoder, msg))
            except EventUnsendable as exc:
                # Nothing of this message was written: only this row (e.g. a header key over
                # 255 bytes, written by plain SQL) is at fault, and it fails alone, at once.
                result.unsendable.append((event, str(exc)))
                guard.failed(event)
                continue
            self._pending[self._next_tag] = event
            self._next_tag += 1
        if frames:
            self._write(b"".join(frames))
        deadline = time.monotonic() + self.confirm_timeout
        try:
            while self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    conn.drain_events(timeout=min(remaining, 1.0))
                except TimeoutError:
                    continue
        finally:
            self._collect(result)
        if self._pending:
            # Silence is the connection's or the broker's fault (a partition, a resource
            # alarm blocking publishers): the attempts are given back and the breaker opens.
            self._pending.clear()
            raise BrokerUnavailable(
                f"broker unavailable: no broker confirm within {self.confirm_timeout:g}s"
            )

    def _write(self, data: bytes) -> None:
        """One socket write through py-amqp's transport (which marks it broken on error)."""
        assert self._conn is not None
        amqp_conn: Any = self._conn.connection
        if not self._channel.is_open:
            raise BrokerUnavailable("broker unavailable: the channel was closed")
        amqp_conn.transport.write(data)
        amqp_conn.bytes_sent += 1  # py-amqp's heartbeat bookkeeping counts writes

    def _collect(self, result: PublishResult) -> None:
        for event in self._acked:
            reason = self._returned.get(str(event.id))
            if reason is None:
                result.confirmed.append(event)
            else:
                result.rejected.append((event, reason))
        result.rejected.extend((e, "broker refused the message (basic.nack)") for e in self._nacked)
        self._acked, self._nacked = [], []

    def _settle(self, delivery_tag: int, multiple: bool, into: list[ClaimedEvent]) -> None:
        # Tags are consecutive within a batch: a multiple confirm walks up from the floor, so a
        # batch's confirms cost one step per message however they are grouped.
        if multiple:
            tags = range(self._floor, delivery_tag + 1)
            self._floor = max(self._floor, delivery_tag + 1)
        else:
            tags = range(delivery_tag, delivery_tag + 1)
        for tag in tags:
            event = self._pending.pop(tag, None)
            if event is not None:
                into.append(event)

    def _on_ack(self, delivery_tag: int, multiple: bool) -> None:
        self._settle(delivery_tag, multiple, self._acked)

    def _on_nack(self, delivery_tag: int, multiple: bool) -> None:
        self._settle(delivery_tag, multiple, self._nacked)

    def _on_return(self, exc: Exception, exchange: str, routing_key: str, msg: Any) -> None:
        # Keyed by the outbox id every message carries as a header (events and tasks alike):
        # an event's message_id is its event id, a task's its task id.
        outbox_id = str((msg.properties.get("application_headers") or {}).get("outbox_id"))
        self._returned[outbox_id] = f"{unroutable(routing_key, exchange)} ({exc})"


def _encode(encoder: BatchEncoder, msg: message.OutgoingMessage) -> bytes:
    """The message's frames; what no AMQP frame can carry is the row's fault."""
    try:
        return encoder.encode(msg)
    except RecursionError as exc:
        raise EventUnsendable("cannot be sent over AMQP: headers nested too deep") from exc
    except struct.error as exc:
        raise EventUnsendable(
            f"cannot be sent over AMQP: {_too_long(msg) or describe(exc)}"
        ) from exc
    except (ValueError, TypeError, OverflowError) as exc:
        raise EventUnsendable(f"cannot be sent over AMQP: {describe(exc)}") from exc


def _too_long(msg: message.OutgoingMessage) -> str | None:
    """Which AMQP short string (255 bytes at most) a message overflows, if one does."""
    size = len(msg.routing_key.encode("utf-8", "surrogatepass"))
    if size > SHORTSTR_MAX:
        return f"event_type is {size} bytes in UTF-8, over the {SHORTSTR_MAX} of a routing key"
    for name in msg.headers:
        size = len(str(name).encode("utf-8", "surrogatepass"))
        if size > SHORTSTR_MAX:
            return f"a header name is {size} bytes in UTF-8, over the {SHORTSTR_MAX} AMQP allows"
    return None
