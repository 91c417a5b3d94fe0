"""``enqueue()``: application code writes an event in its own transaction.

Every check runs before the INSERT, so a bad event raises :class:`~relay.exceptions.EventError`
(naming the field) inside the caller's transaction and nothing is written.

An event with an ``ordering_key`` first takes its key's next number from ``outbox_sequence``,
which locks the key's row until the caller's transaction ends: writers of one key take turns,
so numbers follow commit order with no gaps, and the relay publishes a key in that order. A
transaction that enqueues for several keys locks them in the order it enqueues them; two such
transactions that meet the same keys in opposite orders deadlock (the database aborts one).
:func:`lock_keys` takes all of a transaction's keys up front in sorted order to avoid that.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, event
from sqlalchemy.orm import Session

from relay import config
from relay.exceptions import EventError
from relay.observe import tracing
from relay.publishers.message import RESERVED_HEADERS, TASK_HEADER, encode_body
from relay.store import dialects

log = logging.getLogger(__name__)

MAX_NAME_BYTES = 255  # an AMQP routing key is a shortstr: at most 255 bytes
DEFAULT_MAX_PAYLOAD_BYTES = config.DEFAULT_MAX_PAYLOAD_BYTES

#: Called once after a transaction that enqueued events commits (see :func:`on_commit`).
WakeUp = Callable[[], None]


class Producer:
    """Validates and writes events; ``relay.enqueue`` is the default instance's method."""

    def __init__(
        self, *, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES, wake: WakeUp | None = None
    ) -> None:
        self.max_payload_bytes = max_payload_bytes
        self.wake = wake

    def enqueue(
        self,
        session_or_connection: Session | Connection,
        event_type: str,
        payload: Any,
        *,
        headers: Mapping[str, Any] | None = None,
        ordering_key: str | None = None,
        delay: timedelta | float | None = None,
    ) -> int:
        """Write one event in the caller's transaction and return its outbox id."""
        return self._write(
            session_or_connection,
            event_type,
            payload,
            _headers(headers),
            ordering_key=ordering_key,
            delay=delay,
        )

    def enqueue_task(
        self,
        session_or_connection: Session | Connection,
        name: str,
        body: Any,
        task: Mapping[str, Any],
        *,
        headers: Mapping[str, Any] | None = None,
        ordering_key: str | None = None,
        delay: timedelta | float | None = None,
    ) -> int:
        """Write a Celery task message (``relay.celery.send_task`` builds ``task``: route,
        protocol headers and properties) in the caller's transaction; returns its outbox id."""
        merged = dict(_headers(headers) or {})
        merged[TASK_HEADER] = dict(task)
        return self._write(
            session_or_connection, name, body, merged, ordering_key=ordering_key, delay=delay
        )

    def _write(
        self,
        session_or_connection: Session | Connection,
        event_type: str,
        payload: Any,
        headers: dict[str, Any] | None,
        *,
        ordering_key: str | None,
        delay: timedelta | float | None,
    ) -> int:
        values: dict[str, Any] = {
            "event_type": _name("event_type", event_type),
            "payload": self._payload(payload),
            "headers": tracing.capture(headers),
            "ordering_key": None if ordering_key is None else _name("ordering_key", ordering_key),
        }
        seconds = _delay(delay)
        conn = _connection(session_or_connection)
        dialect = dialects.for_name(conn.dialect.name)
        if seconds:
            values["delay_seconds"] = seconds
        if values["ordering_key"] is not None:
            values["seq"] = dialect.next_seq(conn, values["ordering_key"])
        stmt = dialect.insert_event(delayed=bool(seconds), ordered="seq" in values)
        result = conn.execute(stmt, values)
        primary_key = result.inserted_primary_key
        assert primary_key is not None  # a single-row INSERT always reports its key
        new_id: int = primary_key[0]
        if self.wake is not None:
            _arm_wake(session_or_connection, self.wake)
        return int(new_id)

    def _payload(self, payload: Any) -> Any:
        try:
            size = len(encode_body(payload))
        except (TypeError, ValueError) as exc:
            raise EventError("payload", f"is not JSON-serializable: {exc}") from None
        if size > self.max_payload_bytes:
            raise EventError(
                "payload", f"is {size} bytes as JSON, over the cap of {self.max_payload_bytes}"
            )
        return payload


def _name(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise EventError(field, f"must be a str, not {type(value).__name__}")
    if not value:
        raise EventError(field, "must not be empty")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise EventError(field, f"is {size} bytes in UTF-8, over the limit of {MAX_NAME_BYTES}")
    if "\x00" in value:
        raise EventError(field, "must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise EventError(field, "is not valid Unicode (lone surrogate)") from None
    return value


def _headers(headers: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if headers is None:
        return None
    if not isinstance(headers, Mapping):
        raise EventError("headers", f"must be a mapping, not {type(headers).__name__}")
    for key in headers:
        if not isinstance(key, str) or not key:
            raise EventError("headers", f"keys must be non-empty str, got {key!r}")
        if key in RESERVED_HEADERS:
            raise EventError("headers", f"key {key!r} is reserved for the relay")
        if len(key.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            # An AMQP field-table key is a shortstr: the broker could never carry it.
            raise EventError("headers", f"key {key[:20]!r}... is over {MAX_NAME_BYTES} bytes")
    try:
        json.dumps(dict(headers), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise EventError("headers", f"are not JSON-serializable: {exc}") from None
    return dict(headers)


def _delay(delay: timedelta | float | None) -> float:
    if delay is None:
        return 0.0
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        seconds = float(delay)
    else:
        raise EventError("delay", f"must be a timedelta or seconds, not {type(delay).__name__}")
    if not math.isfinite(seconds) or seconds < 0:
        raise EventError("delay", f"must be a finite, non-negative duration, got {delay!r}")
    return seconds


def _connection(target: Session | Connection) -> Connection:
    return in_transaction(target, "enqueue must run inside the business")


def in_transaction(target: Session | Connection, whose: str) -> Connection:
    """The Connection of a Session or Connection whose transaction is open; ``whose``
    completes "… transaction" in the error naming ``session_or_connection`` otherwise."""
    if isinstance(target, Session):
        return target.connection()
    if isinstance(target, Connection):
        if not target.in_transaction():
            raise EventError(
                "session_or_connection", f"has no transaction open: {whose} transaction"
            )
        return target
    raise EventError(
        "session_or_connection",
        f"must be a SQLAlchemy Session or Connection, not {type(target).__name__}",
    )


class _WakeArm:
    """One Session's or Connection's pending wake-up, with its listeners installed once."""

    __slots__ = ("__weakref__", "pending")

    def __init__(self) -> None:
        self.pending: WakeUp | None = None

    def after_commit(self, *_: Any) -> None:
        """Session: the commit is done."""
        pending, self.pending = self.pending, None
        if pending is not None:
            _call(pending)

    def at_commit(self, conn: Connection) -> None:
        """Connection: the commit is about to happen (Core has no after-commit event), so the
        wake-up waits on a helper thread until the root transaction is over."""
        pending, self.pending = self.pending, None
        transaction = conn.get_transaction()
        if pending is not None and transaction is not None:
            _AFTER_COMMIT.put((transaction, pending))

    def forget(self, *_: Any) -> None:
        self.pending = None


def _call(wake: WakeUp) -> None:
    try:
        wake()
    except Exception:  # the commit happened; a lost wake-up only costs one tick of latency
        log.warning(
            "relay wake-up after commit failed; the tick will pick the events up", exc_info=True
        )


class _AfterCommit:
    """A daemon thread that calls each wake-up once its transaction stopped being active.

    Without it a Core connection's wake-up could reach a relay worker before the row is
    committed: the claim would find nothing and the event would wait for the tick.
    """

    #: Longest wait for one commit; a commit slower than this wakes the relay before it lands
    #: (the tick is still the safety net).
    WAIT_SECONDS = 2.0
    POLL_SECONDS = 0.0002

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[sa.RootTransaction, WakeUp]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pid = 0

    def put(self, item: tuple[sa.RootTransaction, WakeUp]) -> None:
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():  # first use, or a forked child: start its thread
                    self._queue = queue.SimpleQueue()
                    thread = threading.Thread(target=self._run, name="relay-after-commit")
                    thread.daemon = True
                    thread.start()
                    self._pid = os.getpid()
        self._queue.put(item)

    def _run(self) -> None:
        items = self._queue
        while True:
            transaction, wake = items.get()
            deadline = time.monotonic() + self.WAIT_SECONDS
            while transaction.is_active and time.monotonic() < deadline:
                time.sleep(self.POLL_SECONDS)
            _call(wake)


_AFTER_COMMIT = _AfterCommit()


#: Keyed by the Session or Connection *object*. Not ``info``: a Connection's ``info`` belongs to
#: the pooled DBAPI connection and outlives it, so a flag kept there would leave every later
#: Connection on that pooled connection (each ``engine.begin()``) without listeners.
_ARMS: weakref.WeakKeyDictionary[Session | Connection, _WakeArm] = weakref.WeakKeyDictionary()


def _arm_wake(target: Session | Connection, wake: WakeUp) -> None:
    """Call ``wake`` once after the transaction commits, however many events it wrote.

    The listeners are installed once per Session/Connection object and stay (removing a
    listener from inside an event is not allowed); the arm's ``pending`` does the debouncing.
    A Session fires after its outermost commit; a Connection once the commit of its root
    transaction is over (a savepoint's release is not a commit); both forget on a rollback.
    """
    arm = _ARMS.get(target)
    if arm is None:
        arm = _ARMS[target] = _WakeArm()
        if isinstance(target, Session):
            event.listen(target, "after_commit", arm.after_commit)
            event.listen(target, "after_rollback", arm.forget)
        else:
            event.listen(target, "commit", arm.at_commit)
            event.listen(target, "rollback", arm.forget)
    arm.pending = wake


_default: Producer | None = None


def default() -> Producer:
    """The process-wide producer behind :func:`enqueue` (and ``relay.celery.send_task``)."""
    return _default_producer()


def _default_producer() -> Producer:
    global _default  # the one process-wide producer behind relay.enqueue
    if _default is None:
        _default = Producer(max_payload_bytes=config.max_payload_bytes_from_env())
    return _default


def enqueue(
    session_or_connection: Session | Connection,
    event_type: str,
    payload: Any,
    *,
    headers: Mapping[str, Any] | None = None,
    ordering_key: str | None = None,
    delay: timedelta | float | None = None,
) -> int:
    """Write one event into the outbox in the caller's transaction; returns its id.

    A rollback of that transaction leaves no event. Bad input raises ``EventError`` naming the
    field, before anything is written.
    """
    return _default_producer().enqueue(
        session_or_connection,
        event_type,
        payload,
        headers=headers,
        ordering_key=ordering_key,
        delay=delay,
    )


def lock_keys(session_or_connection: Session | Connection, ordering_keys: Iterable[str]) -> None:
    """Lock the sequence rows of ``ordering_keys`` in sorted order, until the transaction ends.

    Call it first in a transaction that enqueues events for several keys, with all of them: two
    such transactions then wait for each other instead of deadlocking, whatever order they
    enqueue in. Takes no number: a rollback or an unused key leaves no trace but an empty row.
    """
    keys = sorted({_name("ordering_key", key) for key in ordering_keys})
    conn = _connection(session_or_connection)
    dialect = dialects.for_name(conn.dialect.name)
    for key in keys:
        conn.execute(dialect.reserve_key(), {"key": key})


def configure(*, max_payload_bytes: int | None = None, wake: WakeUp | None = None) -> Producer:
    """Set the payload cap and the after-commit wake-up of :func:`enqueue`; returns it."""
    producer = _default_producer()
    if max_payload_bytes is not None:
        if max_payload_bytes < 1:
            raise EventError("max_payload_bytes", "must be >= 1")
        producer.max_payload_bytes = max_payload_bytes
    if wake is not None:
        producer.wake = wake
    return producer
