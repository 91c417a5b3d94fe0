"""The claim of the databases with ``UPDATE … RETURNING`` (PostgreSQL, SQLite): one statement
picks the claimable rows, leases them and returns them; each database builds that statement.
MySQL/MariaDB, without it, pick and lease in two statements (:mod:`relay.store.dialects.mysql`).

The same two say ``INSERT … ON CONFLICT`` alike: the upserts they write the same way are here,
each on its database's own INSERT (:meth:`ReturningDialect._insert`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    ScalarSelect,
    Table,
    Update,
    bindparam,
    func,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import ReturningInsert

from relay.store.dialects.clock import cached
from relay.store.dialects.dispatch_path import Dialect
from relay.store.dispatch_path.claimsize import Ask
from relay.store.dispatch_path.holds import NO_HOLD, Hold
from relay.store.schema.tables import inbox, outbox, outbox_progress, sent_counts


class ReturningDialect(Dialect):
    """A :class:`Dialect` whose claim and lease are each one ``UPDATE … RETURNING``."""

    @cached
    def claim_statement(
        self,
        *,
        worker: str,
        limit: int,
        lease_seconds: float,
        expired: bool = True,
        sized: bool = False,
        sized_late: bool = False,
        hold: Hold = NO_HOLD,
        floored: bool = False,
    ) -> Update:
        """Lease the claimable rows :meth:`unordered_ids` picks (``sized``, only those within
        the bound bytes: :meth:`within_bytes`, their sizes read after the lanes locked them
        when ``sized_late``), returning them."""
        inline = sized and not sized_late
        picked: Any = self.unordered_ids(
            limit, expired=expired, sized=inline, hold=hold, floored=floored
        )
        if sized:
            picked = self.within_bytes(picked, late=sized_late)
        return (
            update(outbox)
            .where(self._among(picked.scalar_subquery()))
            .values(**self.lease_values(worker, lease_seconds))
            .returning(*self.claim_columns())
        )

    @cached
    def lease_statement(self, *, worker: str, lease_seconds: float) -> Update:
        """Lease the rows bound as ``ids``, returning them."""
        leased = super().lease_statement(worker=worker, lease_seconds=lease_seconds)
        return leased.returning(*self.claim_columns())

    def _among(self, ids: ScalarSelect[Any]) -> ColumnElement[bool]:
        """The rows whose id ``ids`` selects."""
        return outbox.c.id.in_(ids)

    def claim_unordered(self, conn: Connection, ask: Ask) -> list[Row[Any]]:
        stmt = self.claim_statement(
            worker=ask.worker,
            limit=ask.limit,
            lease_seconds=ask.lease_seconds,
            expired=ask.expired,
            sized=ask.max_bytes is not None,
            sized_late=ask.max_bytes is not None and ask.size_late,
            hold=ask.hold,
            floored=ask.floor is not None,
        )
        params = self.bound_params(ask.max_bytes, ask.first_anyway) | self.floor_params(ask.floor)
        return list(conn.execute(stmt, params).all())

    def lease_ids(self, conn: Connection, ids: Sequence[int], ask: Ask) -> list[Row[Any]]:
        stmt = self.lease_statement(worker=ask.worker, lease_seconds=ask.lease_seconds)
        return list(conn.execute(stmt, self.ids_params(ids)).all())

    def _insert(self, table: Table) -> postgresql.Insert | sqlite.Insert:
        """The database's own INSERT into ``table``, which can say ``ON CONFLICT``."""
        raise NotImplementedError

    def _greatest(self, a: ColumnElement[Any], b: ColumnElement[Any]) -> ColumnElement[Any]:
        return func.greatest(a, b)

    def _upsert_sent_counts(self, values: dict[str, Any]) -> postgresql.Insert | sqlite.Insert:
        stmt = self._insert(sent_counts).values(values)
        c, fresh = sent_counts.c, stmt.excluded
        return stmt.on_conflict_do_update(
            index_elements=[c.minute, c.shard],
            set_={
                "sent": c.sent + fresh.sent,
                "lag_sum": c.lag_sum + fresh.lag_sum,
                "lag_max": self._greatest(c.lag_max, fresh.lag_max),
            },
        )

    def start_progress(self) -> postgresql.Insert | sqlite.Insert:
        """``INSERT … (key, 0) ON CONFLICT DO NOTHING`` into ``outbox_progress``."""
        stmt = self._insert(outbox_progress).values(ordering_key=bindparam("key"), sent_seq=0)
        return stmt.on_conflict_do_nothing(index_elements=[outbox_progress.c.ordering_key])

    def inbox_claim(self) -> ReturningInsert[Any]:
        """``INSERT … ON CONFLICT DO NOTHING RETURNING consumer``: a returned row tells that it
        inserted (psycopg reports no row count here)."""
        stmt = self._insert(inbox).values(
            consumer=bindparam("consumer"), message_id=bindparam("message_id")
        )
        return stmt.on_conflict_do_nothing().returning(inbox.c.consumer)
