"""Kombu publishing with broker confirmation; the only module that talks to the events broker.

On RabbitMQ (py-amqp) the channel is put in confirm mode and a whole batch is published before
its confirms are awaited; ``mandatory`` turns an unroutable message into a ``basic.return``.
Other Kombu transports (Redis, the embedded filesystem one, in-memory) have no confirms; they
are published by ``relay.virtual``.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Sequence
from typing import Any, Protocol

import kombu
import kombu.exceptions

from relay import message, transports, virtual
from relay.records import ClaimedEvent, PublishResult
from relay.urls import redact

log = logging.getLogger(__name__)

_AMQP_TRANSPORTS = frozenset({"amqp", "pyamqp", "amqps"})
#: Raised while encoding one message (py-amqp's ``struct.error`` on a field over its size).
_ENCODING_ERRORS = (struct.error, ValueError, TypeError, OverflowError)


class Publisher(Protocol):
    """Publishes a batch and reports, per event, what the broker confirmed."""

    def publish(self, events: Sequence[ClaimedEvent]) -> PublishResult: ...

    def close(self) -> None: ...


class _ConnectionLost(Exception):
    """Internal: the connection or channel broke during a batch."""


class KombuPublisher:
    """Publishes to a durable topic exchange over one long-lived Kombu connection."""

    def __init__(self, url: str, exchange: str, *, confirm_timeout: float = 10.0) -> None:
        self.url = url
        self.exchange = kombu.Exchange(exchange, type="topic", durable=True)
        self.confirm_timeout = confirm_timeout
        self._conn: kombu.Connection | None = None
        self._channel: Any = None
        self._next_tag = 1
        self._pending: dict[int, ClaimedEvent] = {}
        self._acked: list[ClaimedEvent] = []
        self._nacked: list[ClaimedEvent] = []
        self._returned: dict[str, str] = {}

    # -- connection ------------------------------------------------------------------------
    @property
    def is_amqp(self) -> bool:
        return kombu.Connection(self.url).transport_cls in _AMQP_TRANSPORTS

    def _connect(self) -> None:
        conn = kombu.Connection(
            self.url,
            connect_timeout=self.confirm_timeout,
            transport_options=transports.transport_options(self.url),
        )
        try:
            conn.ensure_connection(max_retries=1)
            channel: Any = conn.channel()
            self.exchange(channel).declare()
            if conn.transport_cls in _AMQP_TRANSPORTS:
                channel.confirm_select()
                channel.events["basic_ack"].add(self._on_ack)
                channel.events["basic_nack"].add(self._on_nack)
                channel.events["basic_return"].add(self._on_return)
        except Exception:
            _close_quietly(conn)
            raise
        self._conn, self._channel, self._next_tag = conn, channel, 1

    def close(self) -> None:
        """Close the connection; the next publish reconnects."""
        conn, self._conn, self._channel = self._conn, None, None
        if conn is not None:
            _close_quietly(conn)

    def _errors(self) -> tuple[type[BaseException], ...]:
        conn = self._conn or kombu.Connection(self.url)
        return (
            *conn.connection_errors,
            *conn.channel_errors,
            kombu.exceptions.OperationalError,
            OSError,
            _ConnectionLost,
        )

    # -- publishing ------------------------------------------------------------------------
    def publish(self, events: Sequence[ClaimedEvent]) -> PublishResult:
        """Publish ``events`` and wait for the broker's verdict on each."""
        result = PublishResult()
        todo = list(events)
        for round_ in (1, 2):
            if not todo:
                break
            try:
                if self._conn is None:
                    self._connect()
                self._publish_batch(todo, result)
                todo = []
            except self._errors() as exc:
                self.close()
                result.error = f"broker unavailable: {_describe(exc)}"
                done = {e.id for e in result.confirmed} | {e.id for e, _ in result.rejected}
                todo = [e for e in todo if e.id not in done]
                if round_ == 1:
                    log.warning("%s; reconnecting once for %d events", result.error, len(todo))
        result.unavailable.extend(todo)
        if not result.unavailable:
            result.error = None
        return result

    def _publish_batch(self, events: list[ClaimedEvent], result: PublishResult) -> None:
        assert self._conn is not None
        if self._conn.transport_cls in _AMQP_TRANSPORTS:
            self._publish_confirmed(events, result)
        else:
            virtual.publish(self._conn, self._channel, self.exchange, events, result)

    def _publish_confirmed(self, events: list[ClaimedEvent], result: PublishResult) -> None:
        channel, conn = self._channel, self._conn
        assert conn is not None
        self._pending.clear()
        self._acked, self._nacked, self._returned = [], [], {}
        for event in events:
            try:
                msg = message.build(event)
                amqp_msg = channel.prepare_message(
                    msg.body,
                    content_type=message.CONTENT_TYPE,
                    content_encoding=message.CONTENT_ENCODING,
                    headers=msg.headers,
                    properties={"delivery_mode": message.PERSISTENT, "message_id": msg.message_id},
                )
                channel.basic_publish(
                    amqp_msg,
                    exchange=self.exchange.name,
                    routing_key=msg.routing_key,
                    mandatory=True,
                )
            except _ENCODING_ERRORS as exc:
                # py-amqp packs a whole frame before writing any of it, so the connection is
                # intact: only this row (e.g. a header key over 255 bytes, written by plain SQL)
                # is at fault, and it must fail alone instead of killing the relay.
                result.rejected.append((event, f"cannot be sent over AMQP: {_describe(exc)}"))
                continue
            self._pending[self._next_tag] = event
            self._next_tag += 1
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
            # RabbitMQ confirms (or nacks) every message, routable or not: silence is the
            # connection's or the broker's fault (a partition, a resource alarm blocking
            # publishers), never the events'. Treat it like a dropped connection, so the
            # attempts are given back and the breaker opens, instead of burying rows.
            self._pending.clear()
            raise _ConnectionLost(f"no broker confirm within {self.confirm_timeout:g}s")

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
        tags = [t for t in self._pending if t <= delivery_tag] if multiple else [delivery_tag]
        for tag in tags:
            event = self._pending.pop(tag, None)
            if event is not None:
                into.append(event)

    def _on_ack(self, delivery_tag: int, multiple: bool) -> None:
        self._settle(delivery_tag, multiple, self._acked)

    def _on_nack(self, delivery_tag: int, multiple: bool) -> None:
        self._settle(delivery_tag, multiple, self._nacked)

    def _on_return(self, exc: Exception, exchange: str, routing_key: str, msg: Any) -> None:
        message_id = str(msg.properties.get("message_id"))
        self._returned[message_id] = (
            f"unroutable: no queue bound to routing key {routing_key!r} on exchange {exchange!r}"
            f" ({exc})"
        )


def _describe(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return redact(f"{type(exc).__name__}: {text}")


def _close_quietly(conn: kombu.Connection) -> None:
    try:
        conn.release()
    except Exception as exc:
        log.debug("closing broker connection: %s", _describe(exc))


__all__ = ["KombuPublisher", "PublishResult", "Publisher"]
