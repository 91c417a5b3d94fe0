"""Helpers that write and read outbox rows directly, for setting up and checking tests."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.store import dialects
from relay.store.schema.tables import outbox


def enqueue_many(engine: sa.Engine, n: int, event_type: str = "test.event", **kw: Any) -> list[int]:
    """Enqueue ``n`` events in one committed transaction; returns their ids."""
    with Session(engine) as session, session.begin():
        return [relay.enqueue(session, event_type, {"n": i}, **kw) for i in range(n)]


def rows(engine: sa.Engine, *ids: int) -> dict[int, dict[str, Any]]:
    """Rows by id (all rows when no id is given)."""
    query = sa.select(outbox)
    if ids:
        query = query.where(outbox.c.id.in_(ids))
    with engine.connect() as conn:
        return {r["id"]: dict(r) for r in conn.execute(query).mappings()}


def count_by_status(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        result = conn.execute(sa.select(outbox.c.status, sa.func.count()).group_by(outbox.c.status))
        return {status: int(n) for status, n in result}


def expire_leases(engine: sa.Engine) -> None:
    """Move every lease one second into the past, as if it had run out (database time)."""
    clock = dialects.for_name(engine.dialect.name)
    with engine.begin() as conn:
        conn.execute(
            sa.update(outbox)
            .where(outbox.c.status == "processing")
            .values(locked_until=clock.now_plus(sa.literal(-1.0, sa.Float)))
        )


def make_due(engine: sa.Engine) -> None:
    """Move every pending row's next_retry_at one second into the past (database time), as if
    its backoff had elapsed."""
    clock = dialects.for_name(engine.dialect.name)
    with engine.begin() as conn:
        conn.execute(
            sa.update(outbox)
            .where(outbox.c.status == "pending", outbox.c.next_retry_at.is_not(None))
            .values(next_retry_at=clock.now_plus(sa.literal(-1.0, sa.Float)))
        )


def insert_at(
    url: str, count: int = 1, event_type: str = "tenant.event", payload: str = "{}"
) -> None:
    """``count`` rows written by plain SQL in one transaction, on a connection of their own
    that then closes (so its session reports its statistics to the server at once)."""
    from sqlalchemy.pool import NullPool

    from relay.store.engine import create_engine

    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text("INSERT INTO outbox (event_type, payload) VALUES (:t, :p)"),
                [{"t": event_type, "p": payload}] * count,
            )
    finally:
        engine.dispose()
