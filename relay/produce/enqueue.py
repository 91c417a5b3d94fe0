"""``enqueue()``: application code writes an event in its own (sync SQLAlchemy) transaction.

The public face of the sync producer and the home of :class:`Producer` (the payload cap, the
default deadlines and the wake-up every producer shares: :func:`default`, read from the
environment once, is also ``relay.aio``'s, ``relay.django``'s and ``relay.celery.send_task``'s);
the checks and the row live in :mod:`relay.produce.core`, the execution in
:mod:`relay.produce.sync_adapter`. Every check runs before the INSERT, so a bad event raises
:class:`~relay.exceptions.EventError` (naming the field) inside the caller's transaction and nothing
is written.

An event with an ``ordering_key`` takes its key's next number from ``outbox_sequence`` in the
database's trigger (migration 0012), which locks the key's row until the caller's transaction
ends: writers of one key take turns, so numbers follow commit order with no gaps, and the relay
publishes a key in that order. A transaction that enqueues for several keys locks them in the
order it enqueues them; two such transactions that meet the same keys in opposite orders
deadlock (the database aborts one). :func:`lock_keys` takes all of a transaction's keys up
front in sorted order to avoid that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from relay.config import env, expiry
from relay.config.expiry import ExpireAfter
from relay.exceptions import EventError
from relay.produce import core, sync_adapter
from relay.produce.core import DEFAULT_MAX_PAYLOAD_BYTES, MAX_NAME_BYTES, Row
from relay.produce.sync_adapter import in_transaction
from relay.produce.wake import WakeUp
from relay.publishers.message import TASK_HEADER

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "MAX_NAME_BYTES",
    "Producer",
    "WakeUp",
    "configure",
    "default",
    "enqueue",
    "in_transaction",
    "lock_keys",
]


class Producer:
    """Validates events and builds their rows; ``relay.enqueue`` is the default instance's."""

    def __init__(
        self,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        wake: WakeUp | None = None,
        expire_after: ExpireAfter | None = None,
    ) -> None:
        self.max_payload_bytes = max_payload_bytes
        self.wake = wake
        #: The default deadline per event type (``RELAY_EXPIRE_AFTER``); None: no default.
        self.expire_after = expire_after

    def enqueue(
        self,
        session_or_connection: Session | Connection,
        event_type: str,
        payload: Any,
        *,
        headers: Mapping[str, Any] | None = None,
        ordering_key: str | None = None,
        delay: timedelta | float | None = None,
        expires_at: datetime | None = None,
        expires_in: timedelta | float | None = None,
    ) -> int:
        """Write one event in the caller's (sync SQLAlchemy) transaction; returns its id."""
        row = self.event(
            event_type,
            payload,
            headers=headers,
            ordering_key=ordering_key,
            delay=delay,
            expires_at=expires_at,
            expires_in=expires_in,
        )
        return sync_adapter.write(session_or_connection, row.statement, row.values, self.wake)

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
        expires_at: datetime | None = None,
    ) -> int:
        """Write a Celery task message (``relay.celery.send_task`` builds ``task``: route,
        protocol headers and properties) in the caller's transaction; returns its outbox id."""
        row = self.task(
            name,
            body,
            task,
            headers=headers,
            ordering_key=ordering_key,
            delay=delay,
            expires_at=expires_at,
        )
        return sync_adapter.write(session_or_connection, row.statement, row.values, self.wake)

    def event(
        self,
        event_type: str,
        payload: Any,
        *,
        headers: Mapping[str, Any] | None = None,
        ordering_key: str | None = None,
        delay: timedelta | float | None = None,
        expires_at: datetime | None = None,
        expires_in: timedelta | float | None = None,
    ) -> Row:
        """The row of one event, every field checked."""
        deadline = core.check_expiry(expires_at, expires_in)
        headers = core.check_headers(headers)
        return core.row(self, event_type, payload, headers, ordering_key, delay, deadline)

    def task(
        self,
        name: str,
        body: Any,
        task: Mapping[str, Any],
        *,
        headers: Mapping[str, Any] | None = None,
        ordering_key: str | None = None,
        delay: timedelta | float | None = None,
        expires_at: datetime | None = None,
    ) -> Row:
        """The row of a Celery task message (``task``: route, protocol headers, properties);
        ``expires_at``: the task's ``expires``, its row's deadline."""
        merged = dict(core.check_headers(headers) or {})
        merged[TASK_HEADER] = dict(task)
        deadline = core.check_expiry(expires_at, None)
        return core.row(self, name, body, merged, ordering_key, delay, deadline)

    def check_payload(self, payload: Any) -> Any:
        """``payload`` if it encodes as JSON within the cap."""
        return core.check_payload(payload, self.max_payload_bytes)

    def configure(
        self, *, max_payload_bytes: int | None = None, wake: WakeUp | None = None
    ) -> None:
        """Change the payload cap and the after-commit wake-up."""
        if max_payload_bytes is not None:
            if max_payload_bytes < 1:
                raise EventError("max_payload_bytes", "must be >= 1")
            self.max_payload_bytes = max_payload_bytes
        if wake is not None:
            self.wake = wake


_default: Producer | None = None


def default() -> Producer:
    """The process-wide producer behind ``relay.enqueue``, ``relay.aio.enqueue``,
    ``relay.django.enqueue`` and ``relay.celery.send_task``: one payload cap, one wake-up, one
    ``RELAY_EXPIRE_AFTER``, each read from the environment once, at the first enqueue (a bad
    value then raises ``ConfigError`` there, before anything is written, and again at the next
    enqueue: nothing half-built is kept)."""
    global _default  # the one process-wide producer
    if _default is None:
        _default = Producer(
            max_payload_bytes=env.max_payload_bytes_from_env(),
            expire_after=expiry.from_env(),
        )
    return _default


def enqueue(
    session_or_connection: Session | Connection,
    event_type: str,
    payload: Any,
    *,
    headers: Mapping[str, Any] | None = None,
    ordering_key: str | None = None,
    delay: timedelta | float | None = None,
    expires_at: datetime | None = None,
    expires_in: timedelta | float | None = None,
) -> int:
    """Write one event into the outbox in the caller's transaction; returns its id.

    A rollback of that transaction leaves no event. Bad input raises ``EventError`` naming the
    field, before anything is written. A deadline, ``expires_at`` (an aware datetime) or
    ``expires_in`` (seconds or a timedelta after the event is due, ``delay`` included), else
    the type's ``RELAY_EXPIRE_AFTER`` default: the relay dead-letters the event unpublished
    if it claims it later (docs/producing.md, "Deadlines").
    """
    return default().enqueue(
        session_or_connection,
        event_type,
        payload,
        headers=headers,
        ordering_key=ordering_key,
        delay=delay,
        expires_at=expires_at,
        expires_in=expires_in,
    )


def lock_keys(session_or_connection: Session | Connection, ordering_keys: Iterable[str]) -> None:
    """Lock the sequence rows of ``ordering_keys`` in sorted order, until the transaction ends.

    Call it first in a transaction that enqueues events for several keys, with all of them: two
    such transactions then wait for each other instead of deadlocking, whatever order they
    enqueue in. Takes no number: a rollback or an unused key leaves no trace but an empty row.
    """
    sync_adapter.lock(session_or_connection, core.sorted_keys(ordering_keys))


def configure(*, max_payload_bytes: int | None = None, wake: WakeUp | None = None) -> Producer:
    """Set the payload cap and the after-commit wake-up of every producer; returns it."""
    producer = default()
    producer.configure(max_payload_bytes=max_payload_bytes, wake=wake)
    return producer
