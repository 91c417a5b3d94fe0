"""MySQL 8 / MariaDB >= 10.6: ``SELECT … FOR UPDATE SKIP LOCKED``, then update the locked ids.

Neither has ``UPDATE … RETURNING`` (MariaDB's is for INSERT/DELETE), and an UPDATE cannot skip
locked rows, so the claim is three statements in one short transaction: lock the oldest
claimable ids (skipping rows other claimers hold), lease exactly those ids, read them back.
The row locks make the ids ours until commit, so no claim token is needed to tell them apart.

Without partial indexes the unordered pick reads one status at a time, ``seq IS NULL``, from
``(status, seq, id)`` in id order:
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
    Row,
    Select,
    TextClause,
    bindparam,
    cast,
    delete,
    func,
    literal_column,
    select,
    text,
    type_coerce,
)
from sqlalchemy.dialects.mysql import Insert, insert

from relay.store.dialects.clock import cached
from relay.store.dialects.dispatch_path import Dialect
from relay.store.dialects.operations import Operations
from relay.store.dispatch_path.claimsize import Ask, fit_bytes
from relay.store.dispatch_path.holds import NO_HOLD, Hold
from relay.store.schema.tables import inbox, outbox, outbox_progress, outbox_sequence, sent_counts
from relay.store.timestamps import UtcDateTime, utc_now

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

    def epoch_now(self) -> ColumnElement[float]:
        """``UNIX_TIMESTAMP(NOW(6))``."""
        return type_coerce(literal_column("UNIX_TIMESTAMP(NOW(6))"), Float)

    def lock(self, stmt: Select[Any]) -> Select[Any]:
        """``FOR UPDATE SKIP LOCKED`` (MariaDB has no ``OF``: joined rows are locked too)."""
        return stmt.with_for_update(skip_locked=True)

    def pick_statement(
        self, due: ColumnElement[bool], limit: int, hold: Hold = NO_HOLD
    ) -> Select[Any]:
        """``SELECT id, <bytes> … seq IS NULL ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED``
        over one status: the ids and their rows' sizes (:meth:`row_bytes`), none that
        ``hold`` holds back."""
        return (
            select(outbox.c.id, self.row_bytes().label("size"))
            .where(due, outbox.c.seq.is_(None), *self.holding(hold))
            .order_by(outbox.c.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )

    @cached
    def claimed_statement(self) -> Select[Any]:
        """The leased rows as the claim returns them; bind ``ids``."""
        ids: Any = bindparam("ids", expanding=True)
        return select(*self.claim_columns()).where(outbox.c.id.in_(ids))

    def claim_unordered(self, conn: Connection, ask: Ask) -> list[Row[Any]]:
        picked: list[Row[Any]] = []
        pending = self.pending_due()
        lanes = (self.lease_expired(), pending) if ask.expired else (pending,)
        for due in lanes:
            if len(picked) < ask.limit:
                pick = self.pick_statement(due, ask.limit - len(picked), ask.hold)
                picked += conn.execute(pick).all()
        if ask.max_bytes is not None:
            # The rows left out stay locked only until the claim commits.
            sizes = (row.size for row in picked)
            picked = picked[: fit_bytes(sizes, ask.max_bytes, first=ask.first_anyway)]
        return self.lease_ids(conn, [row.id for row in picked], ask)

    def lease_ids(self, conn: Connection, ids: Sequence[int], ask: Ask) -> list[Row[Any]]:
        if not ids:
            return []
        leased = conn.execute(
            self.lease_statement(worker=ask.worker, lease_seconds=ask.lease_seconds), {"ids": ids}
        ).rowcount
        # The ids are row-locked by this transaction: nobody can have changed them meanwhile.
        assert leased == len(ids), f"leased {leased} of {len(ids)} locked rows"
        return list(conn.execute(self.claimed_statement(), {"ids": list(ids)}).all())

    def reserve_key(self) -> Insert:
        """``INSERT … (key, 0) ON DUPLICATE KEY UPDATE last_seq = last_seq`` (locks it)."""
        stmt = insert(outbox_sequence).values(ordering_key=bindparam("key"), last_seq=0)
        return stmt.on_duplicate_key_update(last_seq=outbox_sequence.c.last_seq)

    def start_progress(self) -> Insert:
        """``INSERT IGNORE … (key, 0)`` into ``outbox_progress``."""
        return (
            insert(outbox_progress)
            .values(ordering_key=bindparam("key"), sent_seq=0)
            .prefix_with("IGNORE")
        )

    def inbox_claim(self) -> Insert:
        """``INSERT IGNORE``: only the duplicate key becomes "0 rows" (the inbox checks lengths
        first, so no truncation can hide behind it)."""
        stmt = insert(inbox).values(
            consumer=bindparam("consumer"), message_id=bindparam("message_id")
        )
        return stmt.prefix_with("IGNORE")

    def _upsert_sent_counts(self, values: dict[str, Any]) -> Insert:
        stmt = insert(sent_counts).values(values)
        c, fresh = sent_counts.c, stmt.inserted
        return stmt.on_duplicate_key_update(
            sent=c.sent + fresh.sent,
            lag_sum=c.lag_sum + fresh.lag_sum,
            lag_max=func.greatest(c.lag_max, fresh.lag_max),
        )

    def purge_inbox(self, conn: Connection, older_than_seconds: float, limit: int) -> int:
        """MySQL cannot select from the table a DELETE targets: the keys are read first."""
        keys = [tuple(row) for row in conn.execute(self.inbox_oldest(older_than_seconds, limit))]
        if not keys:
            return 0
        return int(conn.execute(self.inbox_delete(), {"keys": keys}).rowcount)


class MySQLOperations(Operations):
    """The operator's statements on MySQL and MariaDB: the retention purge's derived table."""

    def connection_tls(self) -> TextClause:
        """This session's TLS version, empty when it is not encrypted (``relay doctor``)."""
        return text("SHOW SESSION STATUS LIKE 'Ssl_version'")

    def purge_sent(self, older_than_seconds: float, limit: int) -> Delete:
        """Delete up to ``limit`` sent rows older than the retention, oldest first (a range of
        ``ix_outbox_sent_at`` from its start, so a batch reads only the rows it deletes).

        MySQL refuses a LIMIT inside ``IN (subquery)`` and a sub-select of the table being
        deleted from; a derived table (materialized first) is allowed. Joined (a multi-table
        DELETE), each victim is found by primary key; as ``id IN (SELECT … FROM derived)``
        MariaDB scanned the whole table for every batch (0.14 s a batch at 200,000 rows).
        """
        victims = self.oldest_past_retention(older_than_seconds, limit).subquery("victims")
        return delete(outbox).where(outbox.c.id == victims.c.id)
