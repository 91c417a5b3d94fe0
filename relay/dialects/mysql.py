"""MySQL 8 / MariaDB >= 10.6: ``SELECT … FOR UPDATE SKIP LOCKED``, then update the locked ids.

Neither has ``UPDATE … RETURNING`` (MariaDB's is for INSERT/DELETE), and an UPDATE cannot skip
locked rows, so the claim is three statements in one short transaction: lock the oldest
claimable ids (skipping rows other claimers hold), lease exactly those ids, read them back.
The row locks make the ids ours until commit, so no claim token is needed to tell them apart.

Without partial indexes the pick reads one status at a time from ``(status, id)`` in id order:
expired leases first (few: at most the in-flight rows), then due pending rows. ``IN`` over two
statuses would make the server sort, and lock, the whole backlog before applying the LIMIT.
The store's engine runs READ COMMITTED here so the locking reads take no gap locks that would
block producers' INSERTs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Delete,
    Float,
    RowMapping,
    Select,
    Update,
    bindparam,
    cast,
    delete,
    func,
    literal_column,
    select,
    type_coerce,
    update,
)

from relay.dialects.base import CLAIM_COLUMNS, SENT, Dialect
from relay.schema import outbox
from relay.timestamps import UtcDateTime, utc_now

_MICROSECOND: ColumnElement[Any] = literal_column("MICROSECOND")


class MySQLDialect(Dialect):
    """MySQL >= 8.0.1 and MariaDB >= 10.6 (SKIP LOCKED), InnoDB."""

    name: ClassVar[str] = "mysql"

    def now(self) -> ColumnElement[datetime]:
        """``UTC_TIMESTAMP(6)``: UTC whatever the session's time_zone, fixed per statement."""
        return utc_now()

    def now_plus(self, seconds: ColumnElement[float]) -> ColumnElement[datetime]:
        """``TIMESTAMPADD(MICROSECOND, CAST(ROUND(seconds * 1e6) AS SIGNED), now)``."""
        micros = cast(func.round(seconds * literal_column("1000000")), BigInteger)
        return func.timestampadd(_MICROSECOND, micros, utc_now(), type_=UtcDateTime())

    def seconds_since(self, column: ColumnElement[datetime]) -> ColumnElement[float]:
        """``TIMESTAMPDIFF(MICROSECOND, column, now) / 1e6``."""
        micros = func.timestampdiff(_MICROSECOND, column, utc_now())
        return type_coerce(micros / literal_column("1000000.0"), Float)

    def pick_statement(self, due: ColumnElement[bool], limit: int) -> Select[int]:
        """``SELECT id … ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED`` over one status."""
        return (
            select(outbox.c.id)
            .where(due, self.head_of_key())
            .order_by(outbox.c.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )

    def lease_statement(self, *, worker: str, lease_seconds: float) -> Update:
        """Lease the picked rows; bind ``ids``."""
        return (
            update(outbox)
            .where(outbox.c.id.in_(bindparam("ids", expanding=True)))
            .values(**self.lease_values(worker, lease_seconds))
        )

    def claimed_statement(self) -> Select[Any]:
        """The leased rows as the claim returns them; bind ``ids``."""
        return select(*CLAIM_COLUMNS).where(outbox.c.id.in_(bindparam("ids", expanding=True)))

    def claim(
        self, conn: Connection, *, worker: str, limit: int, lease_seconds: float
    ) -> Sequence[RowMapping]:
        ids: list[int] = []
        for due in (self.lease_expired(), self.pending_due()):
            if len(ids) < limit:
                ids += conn.execute(self.pick_statement(due, limit - len(ids))).scalars().all()
        if not ids:
            return []
        leased = conn.execute(
            self.lease_statement(worker=worker, lease_seconds=lease_seconds), {"ids": ids}
        ).rowcount
        # The ids are row-locked by this transaction: nobody can have changed them meanwhile.
        assert leased == len(ids), f"leased {leased} of {len(ids)} locked rows"
        return conn.execute(self.claimed_statement(), {"ids": ids}).mappings().all()

    def purge_sent(self, older_than_seconds: float, limit: int) -> Delete:
        """Delete up to ``limit`` sent rows older than the retention, oldest first.

        MySQL refuses a LIMIT inside ``IN (subquery)`` and a sub-select of the table being
        deleted from; a derived table (materialized first) is allowed.
        """
        victims = (
            select(outbox.c.id)
            .where(
                outbox.c.status == SENT,
                self.seconds_since(outbox.c.sent_at) > older_than_seconds,
            )
            .order_by(outbox.c.id)
            .limit(limit)
            .subquery("victims")
        )
        return delete(outbox).where(outbox.c.id.in_(select(victims.c.id)))
