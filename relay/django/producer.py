"""``relay.django.enqueue``: the relay's producer, writing through Django's connection.

Validation, the row's values, the per-key sequence and the statements are the shared
producer's (``relay.produce``); this adapter only runs them on Django's connection inside the
caller's ``transaction.atomic()`` and hands the after-commit wake-up to
``transaction.on_commit``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any, cast

from django.db import transaction
from sqlalchemy import Connection

from relay.django.connection import DjangoConnection, in_transaction
from relay.observe import tracing
from relay.produce import enqueue as core
from relay.publishers.message import TASK_HEADER
from relay.store import dialects

WHOSE = "relay.django.enqueue"


def enqueue(
    event_type: str,
    payload: Any,
    *,
    headers: Mapping[str, Any] | None = None,
    ordering_key: str | None = None,
    delay: timedelta | float | None = None,
    using: str = "default",
) -> int:
    """Write one event into the outbox in the open ``transaction.atomic()`` block of database
    ``using``; returns its id. A rollback (of the block or of a savepoint around the call)
    leaves no event; outside ``atomic()``, or with a bad event, raises ``relay.EventError``
    naming the field, before anything is written."""
    return _write(event_type, payload, core._headers(headers), ordering_key, delay, using)


def enqueue_task(
    name: str,
    body: Any,
    task: Mapping[str, Any],
    *,
    headers: Mapping[str, Any] | None = None,
    ordering_key: str | None = None,
    delay: timedelta | float | None = None,
    using: str = "default",
) -> int:
    """Write a Celery task message (built by ``relay.celery.transactional``) in the open
    ``atomic()`` block of ``using``; returns its outbox id."""
    merged = dict(core._headers(headers) or {})
    merged[TASK_HEADER] = dict(task)
    return _write(name, body, merged, ordering_key, delay, using)


def lock_keys(ordering_keys: Iterable[str], *, using: str = "default") -> None:
    """Lock the sequence rows of ``ordering_keys`` in sorted order until the ``atomic()``
    block of ``using`` ends (see ``relay.lock_keys``: call it first, with every key the
    transaction will enqueue for, so two such transactions wait instead of deadlocking)."""
    keys = sorted({core._name("ordering_key", key) for key in ordering_keys})
    conn = in_transaction(using, "relay.django.lock_keys")
    dialect = dialects.for_name(conn.dialect.name)
    for key in keys:
        conn.execute(dialect.reserve_key(), {"key": key})


def _write(
    event_type: str,
    payload: Any,
    headers: dict[str, Any] | None,
    ordering_key: str | None,
    delay: timedelta | float | None,
    using: str,
) -> int:
    producer = core.default()
    values: dict[str, Any] = {
        "event_type": core._name("event_type", event_type),
        "payload": producer._payload(payload),
        "headers": tracing.capture(headers),
        "ordering_key": None if ordering_key is None else core._name("ordering_key", ordering_key),
    }
    seconds = core._delay(delay)
    conn = in_transaction(using, WHOSE)
    dialect = dialects.for_name(conn.dialect.name)
    if seconds:
        values["delay_seconds"] = seconds
    if values["ordering_key"] is not None:
        # next_seq only calls execute(...).scalar_one() and .rowcount, which DjangoConnection has.
        values["seq"] = dialect.next_seq(cast(Connection, conn), values["ordering_key"])
    stmt = dialect.insert_event(delayed=bool(seconds), ordered="seq" in values)
    new_id = int(conn.execute(stmt, values).inserted_primary_key[0])
    if producer.wake is not None:
        _arm_wake(conn, producer.wake)
    return new_id


class _Wake:
    """The wake-up registered with ``on_commit``; one per (database, wake) so a transaction
    that enqueues many events wakes the relay once."""

    __slots__ = ("wake",)

    def __init__(self, wake: core.WakeUp) -> None:
        self.wake = wake

    def __call__(self) -> None:
        core._call(self.wake)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Wake) and other.wake == self.wake

    def __hash__(self) -> int:
        return hash(self.wake)


def _arm_wake(conn: DjangoConnection, wake: core.WakeUp) -> None:
    """Call ``wake`` once after the outermost ``atomic()`` block commits. A callback registered
    inside a savepoint that is rolled back is dropped by Django, so the check looks at what
    is still registered, not at a flag."""
    arm = _Wake(wake)
    if any(func == arm for _, func, *_ in conn.django.run_on_commit):
        return
    transaction.on_commit(arm, using=conn.using)
