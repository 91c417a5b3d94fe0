"""The asyncio adapter: executes a producer row in an ``AsyncSession``'s or
``AsyncConnection``'s open transaction (asyncpg, psycopg async, asyncmy/aiomysql, aiosqlite).

Validation and the row come from :mod:`relay.produce.core` before anything is awaited, so a
bad event is refused before the database is touched. The one INSERT is awaited through the
driver: the event loop is never blocked on the database. The after-commit wake-up is armed on
the sync ``Session``/``Connection`` SQLAlchemy runs underneath (:mod:`relay.produce.wake`): it
fires after the commit exactly as for ``relay.enqueue``; on an ``AsyncSession`` it is called in
the event loop's thread, so it must only hand on (as ``relay.celery``'s ``Waker`` does: it sets
a flag for its own thread).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from relay.exceptions import EventError
from relay.produce import core
from relay.produce import wake as wakeup
from relay.produce.enqueue import default
from relay.store import dialects

#: What ``relay.aio`` writes through.
AsyncTarget = AsyncSession | AsyncConnection


async def connection(target: AsyncTarget) -> AsyncConnection:
    """The AsyncConnection of the caller's open transaction (an AsyncSession begins one)."""
    if isinstance(target, AsyncSession):
        return await target.connection()
    if isinstance(target, AsyncConnection):
        if not target.in_transaction():
            raise EventError(
                "session_or_connection",
                "has no transaction open: enqueue must run inside the business transaction",
            )
        return target
    raise EventError(
        "session_or_connection",
        f"must be a SQLAlchemy AsyncSession or AsyncConnection, not {type(target).__name__}",
    )


def _sync_side(target: AsyncTarget) -> Session | Connection:
    """The sync Session or Connection the async one drives, where commit events fire."""
    if isinstance(target, AsyncSession):
        return target.sync_session
    return target.sync_connection or _closed()


def _closed() -> Connection:
    raise EventError("session_or_connection", "is closed")


async def write(target: AsyncTarget, row: core.Row, wake: wakeup.WakeUp | None) -> int:
    """Insert ``row`` in ``target``'s transaction, arm ``wake`` for its commit; the new id."""
    conn = await connection(target)
    result = await conn.execute(row.statement(conn.dialect.name), row.values)
    primary_key = result.inserted_primary_key
    assert primary_key is not None  # a single-row INSERT always reports its key
    if wake is not None:
        wakeup.arm(_sync_side(target), wake)
    return int(primary_key[0])


async def enqueue(
    session_or_connection: AsyncTarget,
    event_type: str,
    payload: Any,
    *,
    headers: Mapping[str, Any] | None = None,
    ordering_key: str | None = None,
    delay: timedelta | float | None = None,
    expires_at: datetime | None = None,
    expires_in: timedelta | float | None = None,
) -> int:
    """Write one event into the outbox in the caller's asyncio transaction; returns its id.

    The same checks as ``relay.enqueue``, before anything is awaited: bad input raises
    ``EventError`` naming the field and nothing is written. A rollback leaves no event.
    """
    producer = default()
    row = producer.event(
        event_type,
        payload,
        headers=headers,
        ordering_key=ordering_key,
        delay=delay,
        expires_at=expires_at,
        expires_in=expires_in,
    )
    return await write(session_or_connection, row, producer.wake)


async def lock_keys(session_or_connection: AsyncTarget, ordering_keys: Iterable[str]) -> None:
    """Lock the sequence rows of ``ordering_keys`` in sorted order until the transaction ends
    (as ``relay.lock_keys``): call it first in a transaction that enqueues several keys."""
    keys = core.sorted_keys(ordering_keys)
    conn = await connection(session_or_connection)
    statement = dialects.for_name(conn.dialect.name).reserve_key()
    for key in keys:
        await conn.execute(statement, {"key": key})
