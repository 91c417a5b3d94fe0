"""The claim of the databases with ``UPDATE … RETURNING`` (PostgreSQL, SQLite): one statement
picks the claimable rows, leases them and returns them; each database builds that statement.
MySQL/MariaDB, without it, pick and lease in two statements (:mod:`relay.store.dialects.mysql`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Row, Update

from relay.store.dialects.dispatch_path import Dialect


class ReturningDialect(Dialect):
    """A :class:`Dialect` whose claim and lease are each one ``UPDATE … RETURNING``."""

    def claim_statement(
        self,
        *,
        worker: str,
        limit: int,
        lease_seconds: float,
        expired: bool = True,
        sized: bool = False,
    ) -> Update:
        """Lease the claimable unordered rows (``sized``: within ``max_bytes``), returning them."""
        raise NotImplementedError

    def lease_statement(self, *, worker: str, lease_seconds: float) -> Update:
        """Lease the rows bound as ``ids``, returning them."""
        raise NotImplementedError

    def claim_unordered(
        self,
        conn: Connection,
        *,
        worker: str,
        limit: int,
        lease_seconds: float,
        expired: bool = True,
        max_bytes: int | None = None,
        first_anyway: bool = True,
    ) -> list[Row[Any]]:
        stmt = self.claim_statement(
            worker=worker,
            limit=limit,
            lease_seconds=lease_seconds,
            expired=expired,
            sized=max_bytes is not None,
        )
        return list(conn.execute(stmt, self.bound_params(max_bytes, first_anyway)).all())

    def lease_ids(
        self, conn: Connection, ids: Sequence[int], *, worker: str, lease_seconds: float
    ) -> list[Row[Any]]:
        stmt = self.lease_statement(worker=worker, lease_seconds=lease_seconds)
        return list(conn.execute(stmt, {"ids": list(ids)}).all())
