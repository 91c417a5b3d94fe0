"""The sync SQLAlchemy adapter: executes a producer row in a ``Session``'s or ``Connection``'s
open transaction, and locks keys there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Executable
from sqlalchemy.orm import Session

from relay.exceptions import EventError
from relay.produce import wake as wakeup
from relay.store import dialects


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


def connection(target: Session | Connection) -> Connection:
    """The Connection a producer writes through: the business transaction's."""
    return in_transaction(target, "enqueue must run inside the business")


def write(
    target: Session | Connection,
    statement: Callable[[str], Executable],
    values: Mapping[str, Any],
    wake: wakeup.WakeUp | None,
) -> int:
    """Insert a producer row (``relay.produce.core.Row``: its ``statement`` for a dialect name,
    and its ``values``) in ``target``'s transaction, arm ``wake`` for its commit; the new id."""
    conn = connection(target)
    result = conn.execute(statement(conn.dialect.name), values)
    primary_key = result.inserted_primary_key
    assert primary_key is not None  # a single-row INSERT always reports its key
    if wake is not None:
        wakeup.arm(target, wake)
    return int(primary_key[0])


def lock(target: Session | Connection, keys: Sequence[str]) -> None:
    """Lock the sequence rows of ``keys`` (already checked and sorted) in ``target``'s
    transaction."""
    conn = connection(target)
    statement = dialects.for_name(conn.dialect.name).reserve_key()
    for key in keys:
        conn.execute(statement, {"key": key})
