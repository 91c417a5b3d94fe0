"""PostgreSQL: one-statement claim (CTE with FOR UPDATE SKIP LOCKED feeding UPDATE … RETURNING)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import (
    ColumnElement,
    Connection,
    RowMapping,
    Update,
    bindparam,
    func,
    literal_column,
    select,
)
from sqlalchemy import update as sa_update
from sqlalchemy.dialects.postgresql import ARRAY

from relay.dialects.base import CLAIM_COLUMNS, PROCESSING, Dialect
from relay.schema import outbox

_IDS = bindparam("ids", type_=ARRAY(sa.BigInteger))
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

    def fence_params(self, keys: Sequence[tuple[int, int]]) -> dict[str, Any]:
        """Two parallel arrays, unnested into a keyed join by :meth:`_fence_many`."""
        return {"ids": [k[0] for k in keys], "attempts": [k[1] for k in keys]}

    def _fence_many(self, worker: str) -> ColumnElement[bool]:
        # ``(id, attempt) IN (...)`` is planned as one OR branch per row and re-planned for every
        # batch size (2-3 ms for 100 rows, 40+ ms for 500); a join against unnest()ed arrays,
        # with ``id = ANY`` to steer the planner to the primary key, costs a fraction of that.
        keys = (
            func.unnest(_IDS, bindparam("attempts", type_=ARRAY(sa.Integer)))
            .table_valued("id", "attempt")
            .render_derived(name="k")
        )
        return sa.and_(
            outbox.c.id == sa.any_(_IDS),
            outbox.c.id == keys.c.id,
            outbox.c.attempt == keys.c.attempt,
            outbox.c.status == PROCESSING,
            outbox.c.locked_by == worker,
        )

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
