"""``enqueue()``: application code writes an event in its own (sync SQLAlchemy) transaction.

The public face of the sync producer; the checks and the row live in :mod:`relay.produce.core`
(shared with ``relay.aio`` and ``relay.django``), the execution in
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

from relay.produce import core, sync_adapter
from relay.produce.core import DEFAULT_MAX_PAYLOAD_BYTES, MAX_NAME_BYTES, Producer, default
from relay.produce.sync_adapter import in_transaction
from relay.produce.wake import WakeUp

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
