"""PostgreSQL: one-statement claim (CTE with FOR UPDATE SKIP LOCKED feeding UPDATE … RETURNING)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import ColumnElement, Connection, RowMapping, Update, func, literal_column, select
from sqlalchemy import update as sa_update

from relay.dialects.base import CLAIM_COLUMNS, Dialect
from relay.schema import outbox

_SECOND: ColumnElement[Any] = literal_column("interval '1 second'")


class PostgresDialect(Dialect):
    """PostgreSQL >= 12."""

    name: ClassVar[str] = "postgresql"

    def now(self) -> ColumnElement[datetime]:
        """``now()``: the transaction's start time on the database server."""
        return func.now()

    def now_plus(self, seconds: ColumnElement[float]) -> ColumnElement[datetime]:
        """``now() + seconds * interval '1 second'``."""
        return func.now() + seconds * _SECOND

    def seconds_since(self, column: ColumnElement[datetime]) -> ColumnElement[float]:
        """``extract(epoch from now() - column)``."""
        return sa.cast(func.extract("epoch", func.now() - column), sa.Float)

    def claim_statement(self, *, worker: str, limit: int, lease_seconds: float) -> Update:
        """Oldest claimable rows, locked with SKIP LOCKED and leased in the same statement."""
        picked = (
            select(outbox.c.id)
            .where(self.claimable())
            .order_by(outbox.c.id)
            .limit(limit)
            .with_for_update(skip_locked=True, of=outbox)
            .cte("picked")
        )
        return (
            sa_update(outbox)
            .where(outbox.c.id == picked.c.id)
            .values(**self.lease_values(worker, lease_seconds))
            .returning(*CLAIM_COLUMNS)
        )

    def claim(
        self, conn: Connection, *, worker: str, limit: int, lease_seconds: float
    ) -> Sequence[RowMapping]:
        stmt = self.claim_statement(worker=worker, limit=limit, lease_seconds=lease_seconds)
        return conn.execute(stmt).mappings().all()

    def try_lock(self, conn: Connection, key: int) -> bool:
        """``pg_try_advisory_xact_lock``: released at commit, so it also works behind a
        transaction-pooling proxy."""
        return bool(conn.execute(select(func.pg_try_advisory_xact_lock(key))).scalar())
