"""``relay.django.enqueue``: the relay's producer, writing through Django's connection.

Validation, the row and its statement are the producer core's (``relay.produce.core``, shared
with ``relay.enqueue`` and ``relay.aio``; a keyed row is numbered by the database's trigger);
this adapter only executes that one statement on Django's connection inside the caller's
``transaction.atomic()`` and hands the after-commit wake-up to ``transaction.on_commit``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from relay.django.connection import DjangoConnection, in_transaction
from relay.produce import core
from relay.produce.enqueue import default
from relay.produce.wake import WakeUp, call_wake
from relay.store import dialects

WHOSE = "relay.django.enqueue"


def enqueue(
    event_type: str,
    payload: Any,
    *,
    headers: Mapping[str, Any] | None = None,
    ordering_key: str | None = None,
    delay: timedelta | float | None = None,
    expires_at: datetime | None = None,
    expires_in: timedelta | float | None = None,
    using: str = "default",
) -> int:
    """Write one event into the outbox in the open ``transaction.atomic()`` block of database
    ``using``; returns its id. A rollback (of the block or of a savepoint around the call)
    leaves no event; outside ``atomic()``, or with a bad event, raises ``relay.EventError``
    naming the field, before anything is written."""
    row = default().event(
        event_type,
        payload,
        headers=headers,
        ordering_key=ordering_key,
        delay=delay,
        expires_at=expires_at,
        expires_in=expires_in,
    )
    return write(row, using)


def lock_keys(ordering_keys: Iterable[str], *, using: str = "default") -> None:
    """Lock the sequence rows of ``ordering_keys`` in sorted order until the ``atomic()``
    block of ``using`` ends (see ``relay.lock_keys``: call it first, with every key the
    transaction will enqueue for, so two such transactions wait instead of deadlocking)."""
    keys = core.sorted_keys(ordering_keys)
    conn = in_transaction(using, "relay.django.lock_keys")
    statement = dialects.for_name(conn.dialect.name).reserve_key()
    for key in keys:
        conn.execute(statement, {"key": key})


def write(row: core.Row, using: str) -> int:
    """Execute ``row``'s statement (an event's, or a Celery task's built by
    ``relay.celery.transactional``) on Django's connection ``using`` inside its ``atomic()``
    block, and arm the producer's wake-up for the block's commit; the new outbox id."""
    conn = in_transaction(using, WHOSE)
    new_id = int(conn.execute(row.statement(conn.dialect.name), row.values).inserted_primary_key[0])
    wake = default().wake
    if wake is not None:
        _arm_wake(conn, wake)
    return new_id


class _Wake:
    """The wake-up registered with ``on_commit``; one per (database, wake) so a transaction
    that enqueues many events wakes the relay once."""

    __slots__ = ("wake",)

    def __init__(self, wake: WakeUp) -> None:
        self.wake = wake

    def __call__(self) -> None:
        call_wake(self.wake)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Wake) and other.wake == self.wake

    def __hash__(self) -> int:
        return hash(self.wake)


def _arm_wake(conn: DjangoConnection, wake: WakeUp) -> None:
    """Call ``wake`` once after the outermost ``atomic()`` block commits. A callback registered
    inside a savepoint that is rolled back is dropped by Django, so the check looks at what
    is still registered, not at a flag."""
    arm = _Wake(wake)
    if any(func == arm for _, func, *_ in conn.django.run_on_commit):
        return
    transaction.on_commit(arm, using=conn.using)
