"""What every Kombu publisher shares: one long-lived connection, reconnect once, error mapping.

Kombu's and the client libraries' errors are translated here, and only here, into the
relay's tree (``raise … from exc``): a dropped connection, a refused connect or a broken
channel is :class:`~relay.exceptions.BrokerUnavailable`, which is retryable: the batch is
tried once more on a fresh connection, and what is still unsent is handed back unpublished.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import kombu
import kombu.exceptions

from relay.config.urls import redact
from relay.exceptions import (
    BrokerBlocked,
    BrokerUnavailable,
    ConfigError,
    EventUnsendable,
    MessageRefused,
    PublishError,
)
from relay.ordering import RunGuard
from relay.publishers import message, transports
from relay.publishers.signatures import Keyring
from relay.records import ClaimedEvent, PublishResult

log = logging.getLogger(__name__)

_Built = TypeVar("_Built")


class KombuPublisher:
    """Publishes to a durable topic exchange over one long-lived Kombu connection.

    Subclasses set the channel up (:meth:`_setup`) and publish one batch on it
    (:meth:`_publish_batch`); this class connects, reconnects and maps errors.
    """

    #: Signs every event published (``RELAY_SIGNING_KEYS``); None: unsigned.
    keyring: Keyring | None = None

    def __init__(self, url: str, exchange: str, *, confirm_timeout: float = 10.0) -> None:
        self.url = url
        self.exchange = kombu.Exchange(exchange, type="topic", durable=True)
        self.confirm_timeout = confirm_timeout
        self._conn: kombu.Connection | None = None
        self._channel: Any = None
        #: Task queues declared on this connection (see :meth:`_declare_route`).
        self._declared: set[str] = set()
        #: Held while the connection is in use: a publish, a close, a heartbeat.
        self._lock = threading.RLock()
        #: Of a failover URL's nodes, the one the next connection tries first.
        self._node = 0

    # -- for subclasses --------------------------------------------------------------------
    def _setup(self, conn: kombu.Connection, channel: Any) -> None:
        """Prepare a freshly opened channel (the exchange is already declared)."""

    def _publish_batch(self, events: list[ClaimedEvent], result: PublishResult) -> None:
        raise NotImplementedError

    def _prepare(self, event: ClaimedEvent) -> message.OutgoingMessage:
        """The message for ``event`` (:func:`relay.publishers.message.prepare`); a replay
        publisher routes it elsewhere (:mod:`relay.publishers.queue_replay`)."""
        return message.prepare(event, self.keyring)

    def _connection_options(self) -> dict[str, Any]:
        """``kombu.Connection`` keywords besides the URL: the deadlines of its calls."""
        return {"connect_timeout": self.confirm_timeout}

    # -- connection ------------------------------------------------------------------------
    def _connect(self) -> None:
        options = self._connection_options()
        own = options.pop("transport_options", {})
        nodes = failover_order(self.url, self._node)
        failed: list[BaseException] = []
        if len(nodes) > 1 and transports.broker_tls(self.url)[1].encrypted:
            conn = self._connect_each(nodes, own, options, failed)
        else:
            conn = transports.kombu_connection(";".join(nodes), transport_options=own, **options)
        try:
            # A failover URL (``amqp://a;amqp://b``): Kombu tries each node once, in turn,
            # moving on after each failure without a pause; a single URL is retried once.
            conn.ensure_connection(
                max_retries=max(1, len(nodes) - 1), errback=lambda exc, _: failed.append(exc)
            )
            channel: Any = conn.channel()
            self.exchange(channel).declare()
            self._setup(conn, channel)
        except Exception:
            close_quietly(conn)
            raise
        self._conn, self._channel = conn, channel
        self._declared = set()
        if len(nodes) > 1:
            # The next connection starts at this node, not at a dead first one.
            self._node = (self._node + len(failed)) % len(nodes)
            log.info("connected to broker node %s", redact(nodes[len(failed) % len(nodes)]))

    @staticmethod
    def _connect_each(
        nodes: list[str], own: dict[str, Any], options: dict[str, Any], failed: list[BaseException]
    ) -> kombu.Connection:
        """A connection to the first of ``nodes`` that accepts one, each with its own TLS:
        Kombu's failover would verify every node against the first node's host name."""
        for node in nodes[:-1]:
            conn = transports.kombu_connection(node, transport_options=own, **options)
            try:
                conn.ensure_connection(max_retries=0)
            except Exception as exc:  # this node is down or refused: the next one
                failed.append(exc)
                close_quietly(conn)
                continue
            return conn
        return transports.kombu_connection(nodes[-1], transport_options=own, **options)

    def connect(self) -> None:
        """Open the connection now instead of at the first publish (a failure raises
        :class:`~relay.exceptions.BrokerUnavailable`)."""
        with self._lock:
            if self._conn is None:
                with self._translated():
                    self._connect()

    def _declare_route(self, msg: message.OutgoingMessage) -> None:
        """Declare a Celery task's queue (and its exchange) once per connection, as
        ``app.send_task`` does before it publishes, so the first task is routable."""
        spec = msg.declare
        if not spec or spec["queue"] in self._declared:
            return
        exchange = (
            kombu.Exchange(spec["exchange"], type=spec["exchange_type"], durable=spec["durable"])
            if spec["exchange"]
            else ""
        )
        queue = kombu.Queue(
            spec["queue"],
            exchange,
            routing_key=spec["routing_key"],
            durable=spec["durable"],
            queue_arguments=spec.get("arguments") or None,
        )
        queue(self._declaring_channel()).declare()
        self._declared.add(spec["queue"])

    def _declaring_channel(self) -> Any:
        """The channel :meth:`_declare_route` declares on: the publishing one here."""
        return self._channel

    def close(self) -> None:
        """Close the connection; the next publish reconnects."""
        with self._lock:
            conn, self._conn, self._channel = self._conn, None, None
            if conn is not None:
                self._release(conn)

    def _release(self, conn: kombu.Connection) -> None:
        close_quietly(conn)

    def _translated(self) -> contextlib.AbstractContextManager[None]:
        """Kombu's and the client's connection and channel errors -> BrokerUnavailable."""
        return translated(self._conn or transports.kombu_connection(self.url))

    # -- publishing ------------------------------------------------------------------------
    def publish(self, events: Sequence[ClaimedEvent]) -> PublishResult:
        """Publish ``events`` and report the broker's verdict on each."""
        with self._lock:
            return self._publish(events)

    def _publish(self, events: Sequence[ClaimedEvent]) -> PublishResult:
        result = PublishResult()
        todo = list(events)
        for round_ in (1, 2):
            if not todo:
                break
            try:
                self.connect()
                with self._translated():
                    self._publish_batch(todo, result)
                todo = []
            except BrokerBlocked as exc:
                # The broker paused publishing: the connection is sound and is the one that
                # will hear the unblock; another would not help. The rest is given back.
                result.error = exc
                todo = self._not_done(todo, result)
                break
            except PublishError as exc:
                self.close()
                result.error = exc
                todo = self._not_done(todo, result)
                if not exc.retryable:
                    break
                if round_ == 1:
                    log.warning("%s; reconnecting once for %d events", exc, len(todo))
        result.unavailable.extend(todo)
        if not result.unavailable:
            result.error = None
        return result

    @staticmethod
    def _not_done(todo: list[ClaimedEvent], result: PublishResult) -> list[ClaimedEvent]:
        """``todo`` without the events ``result`` already has a verdict on."""
        done = {e.id for e in result.confirmed} | {e.id for e, _ in result.rejected}
        done |= {e.id for e in result.withheld} | {e.id for e, _ in result.unsendable}
        return [e for e in todo if e.id not in done]


def publishable(
    events: Sequence[ClaimedEvent],
    result: PublishResult,
    guard: RunGuard,
    build: Callable[[ClaimedEvent], _Built],
) -> Iterator[tuple[ClaimedEvent, _Built]]:
    """Each of ``events`` that may go out, with what ``build`` makes of it (its message, its
    frames). The others get their verdict in ``result`` here: a row behind a failed one of its
    key is withheld (``guard``); a row ``build`` raises ``EventUnsendable`` for fails alone, at
    once (nothing of it was written: e.g. a header key over 255 bytes, written by plain SQL);
    one whose task queue the broker refused to declare (``MessageRefused``) spends an attempt.
    Either holds back the rest of its key's run, as does a row the caller fails: this is lazy,
    so the guard is asked about each row only once the caller is done with the one before."""
    for event in events:
        if guard.stopped and guard.holds(event):
            result.withheld.append(event)
            continue
        try:
            built = build(event)
        except EventUnsendable as exc:
            result.unsendable.append((event, str(exc)))
            guard.failed(event)
            continue
        except MessageRefused as exc:
            result.rejected.append((event, str(exc)))
            guard.failed(event)
            continue
        yield event, built


def failover_order(url: str, first: int) -> list[str]:
    """The nodes of a Kombu failover URL (``amqp://a;amqp://b``), starting at ``first``."""
    nodes = [u.strip() for u in url.split(";") if u.strip()] or [url]
    first %= len(nodes)
    return nodes[first:] + nodes[:first]


def kombu_message(channel: Any, msg: message.OutgoingMessage) -> Any:
    """``msg`` as the transport's own message object, built by its ``prepare_message``."""
    props = message.properties(msg)
    return channel.prepare_message(
        msg.body,
        props.pop("priority", None),
        props.pop("content_type"),
        props.pop("content_encoding"),
        props.pop("headers"),
        props,
    )


def unroutable(routing_key: str, exchange: str) -> str:
    """The rejection reason of a message no queue is bound for."""
    return f"unroutable: no queue bound to routing key {routing_key!r} on exchange {exchange!r}"


@contextlib.contextmanager
def translated(conn: kombu.Connection, what: str = "broker unavailable") -> Iterator[None]:
    """``conn``'s transport's connection and channel errors -> BrokerUnavailable(``what: ...``)."""
    errors: tuple[type[BaseException], ...] = (
        *conn.connection_errors,
        *conn.channel_errors,
        kombu.exceptions.OperationalError,
        OSError,
    )
    try:
        yield
    except errors as exc:
        raise BrokerUnavailable(f"{what}: {describe(exc)}") from exc


@contextlib.contextmanager
def connection(url: str, *, timeout: int) -> Iterator[kombu.Connection]:
    """A connection to ``url``, connected, for checks that publish nothing (it declares no
    exchange, unlike :meth:`KombuPublisher.connect`); BrokerUnavailable when refused,
    ConfigError when ``url`` names no transport Kombu has."""
    try:
        # The constructor resolves the scheme's transport class.
        conn = transports.kombu_connection(url)
    except (KeyError, ImportError) as exc:  # a scheme Kombu has no transport for
        raise ConfigError(f"{redact(url)!r} names no usable transport: {describe(exc)}") from exc
    try:
        with translated(conn, "broker unreachable"):
            conn.ensure_connection(max_retries=1, timeout=timeout)
        yield conn
    finally:
        close_quietly(conn)


def describe(exc: BaseException) -> str:
    """``Type: text`` of an exception, with any password in a URL redacted."""
    text = str(exc).strip() or type(exc).__name__
    return redact(f"{type(exc).__name__}: {text}")


def close_quietly(conn: kombu.Connection) -> None:
    try:
        conn.release()
    except Exception as exc:
        log.debug("closing broker connection: %s", describe(exc))
