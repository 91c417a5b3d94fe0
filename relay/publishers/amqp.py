"""RabbitMQ with publisher confirms (py-amqp through Kombu).

The channel is put in confirm mode and a whole batch is published before its confirms are
awaited; ``mandatory`` turns an unroutable message into a ``basic.return``. RabbitMQ confirms
(or nacks) every message, routable or not, so a batch left without any confirm for
``confirm_timeout`` is the connection's or the broker's fault, never the events'.

The batch's frames are encoded here (:mod:`relay.publishers.frames`) and written with one
socket write; py-amqp, through Kombu, still opens the connection (and negotiates
``frame_max``), declares the exchange, and reads the confirms and returns. Every call on the
connection has a deadline and an idle connection is kept alive by heartbeats
(:mod:`relay.publishers.liveness`). A broker that blocks publishing (a resource alarm,
``connection.blocked``) gets no more writes: the batch is given back as
:class:`~relay.exceptions.BrokerBlocked` and the connection kept to hear the unblock.

A message the broker refuses alone (a 406 for its size, a 404 for a task's exchange) closes the
channel, not the connection, and the close does not say which message it was: the messages
acked before it are confirmed, and the unconfirmed rest is published again one at a time on a
fresh channel until the refused one is found alone; it fails (its attempt, with the broker's
reason) and the remainder goes on as a batch. Those in flight when the channel closed may
reach the broker twice (docs/guarantees.md, "When the broker refuses one message").
"""

from __future__ import annotations

import logging
import struct
import time
from typing import Any

import amqp.exceptions
import kombu

from relay.config import timing
from relay.exceptions import BrokerBlocked, BrokerUnavailable, EventUnsendable, MessageRefused
from relay.ordering import RunGuard
from relay.publishers import liveness, message
from relay.publishers.frames import BatchEncoder
from relay.publishers.kombu_connection import describe, publishable, unroutable
from relay.records import ClaimedEvent, PublishResult

log = logging.getLogger(__name__)

#: The longest AMQP short string (a routing key, a header name), in bytes.
SHORTSTR_MAX = 255
#: The broker's refusals of one message (the row's fault, docs/guarantees.md): it closes the
#: channel, not the connection. 406 PRECONDITION_FAILED (over ``max_message_size``; a queue
#: declared with other arguments), 404 NOT_FOUND (a task's exchange; the relay's own is
#: redeclared instead), 311 CONTENT_TOO_LARGE. 403 ACCESS_REFUSED is left out on purpose: a
#: permission is the deployment's, not the row's, and dead-lettering rows while an operator
#: fixes a user's permissions would lose them to a typo; it stays an outage that burns nothing.
_REFUSALS = (
    amqp.exceptions.PreconditionFailed,
    amqp.exceptions.NotFound,
    amqp.exceptions.ContentTooLarge,
)
#: A refusal on the publishing channel: the messages still unconfirmed, in publish order,
#: and the broker's error.
_Refusal = tuple[list[ClaimedEvent], amqp.exceptions.ChannelError]


class AmqpPublisher(liveness.WatchedPublisher):
    """Publishes a batch on a confirm-mode channel, then awaits the batch's confirms."""

    def __init__(
        self,
        url: str,
        exchange: str,
        *,
        confirm_timeout: float = 10.0,
        on_blocked: liveness.OnBlocked | None = None,
    ) -> None:
        super().__init__(url, exchange, confirm_timeout=confirm_timeout, on_blocked=on_blocked)
        self._next_tag = 1
        self._pending: dict[int, ClaimedEvent] = {}
        #: No tag below this is pending: a ``multiple`` confirm settles from here up.
        self._floor = 1
        self._acked: list[ClaimedEvent] = []
        self._nacked: list[ClaimedEvent] = []
        #: Nacks in the batch being published (see :meth:`_publish_batch`).
        self._nacks = 0
        self._returned: dict[str, str] = {}
        self._encoder: BatchEncoder | None = None
        #: The channel task queues are declared on: a declare the broker refuses closes it,
        #: never the publishing channel and its unconfirmed messages.
        self._declarer: Any = None

    def _setup(self, conn: kombu.Connection, channel: Any) -> None:
        super()._setup(conn, channel)
        self._declarer = None
        self._confirming(conn, channel)

    def _confirming(self, conn: kombu.Connection, channel: Any) -> None:
        """Put ``channel`` in confirm mode, listened to by this publisher."""
        channel.confirm_select()
        channel.events["basic_ack"].add(self._on_ack)
        channel.events["basic_nack"].add(self._on_nack)
        channel.events["basic_return"].add(self._on_return)
        self._next_tag = 1
        amqp_conn: Any = conn.connection
        self._encoder = BatchEncoder(channel.channel_id, self.exchange.name, amqp_conn.frame_max)

    def _publish_batch(self, events: list[ClaimedEvent], result: PublishResult) -> None:
        self._await_unblock()
        self._nacks = 0
        guard = RunGuard()  # a row refused here withholds what follows it (relay.ordering)
        todo = events
        while todo:
            refused = self._publish_window(todo, result, guard)
            if refused is None:
                break
            self._renew_channel()
            todo = self._isolate(refused[0], result, guard)
        self._blocked.unblocked()  # the broker took this batch: any alarm is over
        if self._nacks:
            # A nack is the queue's trouble more than the message's: a channel that first
            # published to a quorum queue while its leader was being elected kept nacking every
            # message after the election (RabbitMQ 3.10, measured). A fresh channel asks afresh.
            self._renew_channel()

    def _isolate(
        self, unconfirmed: list[ClaimedEvent], result: PublishResult, guard: RunGuard
    ) -> list[ClaimedEvent]:
        """Publish ``unconfirmed`` one message at a time until the broker refuses one alone:
        that one fails, and the rest after it is returned, to go on as a batch."""
        for i, event in enumerate(unconfirmed):
            refused = self._publish_window([event], result, guard)
            if refused is None:
                continue
            self._renew_channel()
            result.rejected.append((event, self._refusal(event, refused[1])))
            guard.failed(event)
            return unconfirmed[i + 1 :]
        return []

    def _refusal(self, event: ClaimedEvent, exc: amqp.exceptions.ChannelError) -> str:
        """The reason ``event`` fails with; a 404 for the relay's own exchange is no row's
        fault (someone deleted the exchange) but the connection's: it is redeclared."""
        if isinstance(exc, amqp.exceptions.NotFound):
            exchange = self._prepare(event).exchange
            if exchange is None or exchange == self.exchange.name:
                raise BrokerUnavailable(f"broker unavailable: {describe(exc)}") from exc
        return f"broker refused: {exc.reply_text or describe(exc)}"

    def _publish_window(
        self, events: list[ClaimedEvent], result: PublishResult, guard: RunGuard
    ) -> _Refusal | None:
        """Publish ``events`` in one write and await their confirms; the unconfirmed rest and
        the broker's error when it closed the channel on a message it refused."""
        conn = self._conn
        assert conn is not None
        self._pending.clear()
        self._floor = self._next_tag
        self._acked, self._nacked, self._returned = [], [], {}
        frames: list[bytes] = []
        for event, frame in publishable(events, result, guard, self._frames):
            frames.append(frame)
            self._pending[self._next_tag] = event
            self._next_tag += 1
        if frames:
            self._write(b"".join(frames))
        deadline = time.monotonic() + self.confirm_timeout
        refusal: amqp.exceptions.ChannelError | None = None
        try:
            while self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                conn.heartbeat_check(rate=timing.HEARTBEATS_PER_INTERVAL)
                try:
                    self._read_frame(min(remaining, 1.0))
                except TimeoutError:
                    continue
                except _REFUSALS as exc:
                    refusal = exc
                    break
                if self._paused is not None:
                    break  # blocked: no confirm comes until the alarm clears
        finally:
            self._collect(result)
        if refusal is not None:
            unconfirmed = [self._pending[tag] for tag in sorted(self._pending)]
            self._pending.clear()
            return unconfirmed, refusal
        if self._pending and self._paused is not None:
            # Written before the broker said it blocks publishing: they may reach the queues
            # once it unblocks, and are given back (sent again later, as duplicates).
            self._pending.clear()
            raise BrokerBlocked(f"broker blocked publishing: {self._paused}")
        if self._pending:
            # Silence is the connection's or the broker's fault (a partition, a resource
            # alarm blocking publishers): the attempts are given back and the breaker opens.
            self._pending.clear()
            raise BrokerUnavailable(
                f"broker unavailable: no broker confirm within {self.confirm_timeout:g}s"
            )
        return None

    def _frames(self, event: ClaimedEvent) -> bytes:
        """``event``'s message as AMQP frames, a task's queue declared first."""
        assert self._encoder is not None
        msg = self._prepare(event)
        self._declare_task_route(msg)
        return _encode(self._encoder, msg)

    def _declare_task_route(self, msg: message.OutgoingMessage) -> None:
        """:meth:`_declare_route` on the declaring channel; a declare the broker refuses (a
        queue that exists with other arguments) is this message's fault alone."""
        try:
            self._declare_route(msg)
        except _REFUSALS as exc:
            declarer, self._declarer = self._declarer, None
            _close_channel(declarer)
            raise MessageRefused(f"broker refused: {exc.reply_text or describe(exc)}") from exc

    def _declaring_channel(self) -> Any:
        if self._declarer is None:
            assert self._conn is not None
            self._declarer = self._conn.channel()
        return self._declarer

    def _renew_channel(self) -> None:
        """Replace the publishing channel after the broker closed it on a refused message
        (py-amqp reopens it, but without confirm mode and with its delivery tags reset)."""
        conn, old = self._conn, self._channel
        assert conn is not None
        old.events["basic_ack"].discard(self._on_ack)
        old.events["basic_nack"].discard(self._on_nack)
        old.events["basic_return"].discard(self._on_return)
        _close_channel(old)
        channel = conn.channel()
        self._confirming(conn, channel)
        self._channel = channel

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
        self._nacks += len(self._nacked)
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


def _close_channel(channel: Any) -> None:
    """Close a channel this publisher gives up, whatever state the broker left it in."""
    if channel is None:
        return
    try:
        channel.close()
    except Exception as exc:  # already closed, or the connection went: nothing to give back
        log.debug("closing a refused channel: %s", describe(exc))


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
