"""``enqueue()``: application code writes an event in its own transaction.

Every check runs before the INSERT, so a bad event raises :class:`~relay.exceptions.EventError`
(naming the field) inside the caller's transaction and nothing is written.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, event
from sqlalchemy.orm import Session

from relay import config, dialects
from relay.exceptions import EventError
from relay.message import RESERVED_HEADERS, encode_body
from relay.schema import outbox

log = logging.getLogger(__name__)

MAX_NAME_BYTES = 255  # an AMQP routing key is a shortstr: at most 255 bytes
DEFAULT_MAX_PAYLOAD_BYTES = config.DEFAULT_MAX_PAYLOAD_BYTES

#: Called once after a transaction that enqueued events commits (see :func:`on_commit`).
WakeUp = Callable[[], None]
_WAKE_KEY = "relay_wake_pending"
_INSTALLED_KEY = "relay_wake_installed"


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
        values: dict[str, Any] = {
            "event_type": _name("event_type", event_type),
            "payload": self._payload(payload),
            "headers": _headers(headers),
            "ordering_key": None if ordering_key is None else _name("ordering_key", ordering_key),
        }
        seconds = _delay(delay)
        conn = _connection(session_or_connection)
        if seconds:
            values["next_retry_at"] = dialects.for_name(conn.dialect.name).now_plus(
                sa.literal(seconds, sa.Float)
            )
        result = conn.execute(sa.insert(outbox).values(**values))
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
    if isinstance(target, Session):
        return target.connection()
    if isinstance(target, Connection):
        if not target.in_transaction():
            raise EventError(
                "session_or_connection",
                "has no transaction open: enqueue must run inside the business transaction",
            )
        return target
    raise EventError(
        "session_or_connection",
        f"must be a SQLAlchemy Session or Connection, not {type(target).__name__}",
    )


def _arm_wake(target: Session | Connection, wake: WakeUp) -> None:
    """Call ``wake`` once after the transaction commits, however many events it wrote.

    The listeners are installed once per Session/Connection and stay (removing a listener from
    inside an event is not allowed); a per-transaction flag in ``info`` does the debouncing.
    """
    target.info[_WAKE_KEY] = wake
    if target.info.get(_INSTALLED_KEY):
        return
    target.info[_INSTALLED_KEY] = True
    # Session fires after the commit; a bare Connection only offers the moment of commit.
    session = isinstance(target, Session)

    def fire(*_: Any) -> None:
        pending = target.info.pop(_WAKE_KEY, None)
        if pending is None:
            return
        try:
            pending()
        except Exception:  # the commit happened; a lost wake-up only costs one tick of latency
            log.warning(
                "relay wake-up after commit failed; the tick will pick the events up", exc_info=True
            )

    def forget(*_: Any) -> None:
        target.info.pop(_WAKE_KEY, None)

    event.listen(target, "after_commit" if session else "commit", fire)
    event.listen(target, "after_rollback" if session else "rollback", forget)


_default: Producer | None = None


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
