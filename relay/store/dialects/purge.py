"""Retention's statements: deleting rows at send with their per-minute count, the purger's lease
and record, the purge's readings (rows past the retention, the oldest sent row's age).

Counts are kept by epoch minute and shard in ``outbox_sent_counts``; the minute and the lags
are computed from the database's clock, as every time the relay compares.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Delete,
    Float,
    Insert,
    Select,
    String,
    Update,
    bindparam,
    cast,
    delete,
    func,
    insert,
    literal,
    null,
    or_,
    select,
    type_coerce,
    update,
)

from relay.store.dialects.clock import PENDING, SENT, cached
from relay.store.dialects.dispatch_path import Dialect
from relay.store.schema.tables import outbox, purger, sent_counts

#: The purger row every migrated database holds (migration 0013).
SENT_PURGER = "sent"
#: Pending rows at the head of the unordered claim's lane that the delivery-lag probe reads.
LAG_PROBE_ROWS = 32


class RetentionStatements:
    """Retention's SQL over one database, on that database's clock."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def this_minute(self) -> ColumnElement[int]:
        """The database's current epoch minute."""
        return cast(func.floor(self.dialect.epoch_now() / 60), BigInteger)

    # -- delete on send (the dispatch path) --------------------------------------------------
    @cached
    def delete_sent(self, worker: str) -> Delete:
        """Confirmed rows are deleted instead of marked sent, fenced as ``mark_sent``; bind
        ``keys`` (or the dialect's fence parameters)."""
        return delete(outbox).where(self.dialect._fence_many(worker))

    @cached
    def count_sent(self) -> Insert:
        """Add ``b_sent`` events to this minute's count in shard ``b_shard``, with their lag
        from ``b_created_sum`` (the sum of their ``created_at`` epochs) and ``b_created_min``."""
        now = self.dialect.epoch_now()
        n = bindparam("b_sent", type_=BigInteger)
        return self.dialect._upsert_sent_counts(
            {
                "minute": self.this_minute(),
                "shard": bindparam("b_shard"),
                "sent": n,
                "lag_sum": n * now - bindparam("b_created_sum", type_=Float),
                "lag_max": now - bindparam("b_created_min", type_=Float),
            }
        )

    # -- the purger's lease and record -------------------------------------------------------
    def take_lease(self) -> Update:
        """Lease purger ``b_name`` to ``b_holder`` for ``b_seconds`` if it is free, expired or
        already this holder's (renewal); one row updated = the lease is held."""
        p = purger.c
        return (
            update(purger)
            .where(
                p.name == bindparam("b_name"),
                or_(
                    p.holder.is_(None),
                    p.holder == bindparam("b_holder"),
                    p.expires_at < self.dialect.now(),
                ),
            )
            .values(
                holder=bindparam("b_holder"),
                expires_at=self.dialect.now_plus(bindparam("b_seconds", type_=Float)),
            )
        )

    def add_purger(self) -> Insert:
        """Purger ``b_name``'s row, where a database lacks it (its tables were copied without
        their rows); a racing insert may fail on the primary key, which is as good."""
        exists = select(purger.c.name).where(purger.c.name == bindparam("b_name")).exists()
        row = select(bindparam("b_name", type_=String)).where(~exists)
        return insert(purger).from_select(["name"], row)

    def end_run(self) -> Update:
        """Give purger ``b_name``'s lease back and record the run: ``b_behind`` rows left past
        the retention (the previous run's figure moves to ``prev_behind_rows``)."""
        p = purger.c
        return (
            update(purger)
            .where(p.name == bindparam("b_name"), p.holder == bindparam("b_holder"))
            # In this order: MySQL assigns left to right, reading values already assigned.
            .ordered_values(
                (p.prev_behind_rows, p.behind_rows),
                (p.behind_rows, bindparam("b_behind", type_=BigInteger)),
                (p.holder, null()),
                (p.expires_at, null()),
                (p.ran_at, self.dialect.now()),
            )
        )

    def purger_record(self) -> Select[Any]:
        """Purger ``b_name``'s last two figures, seconds since it last ran, and its holder."""
        p = purger.c
        return select(
            p.behind_rows,
            p.prev_behind_rows,
            self.dialect.seconds_since(p.ran_at).label("ran_ago"),
            p.holder,
        ).where(p.name == bindparam("b_name"))

    # -- the purge's readings ------------------------------------------------------------------
    def past_retention(self, older_than_seconds: float, limit: int) -> Select[Any]:
        """Sent rows older than the retention, counted no further than ``limit`` (a bounded
        range of ``ix_outbox_sent_at``, read as the purge reads it: the retention tested after
        the LIMIT, see ``Operations.oldest_past_retention``)."""
        oldest = (
            select(outbox.c.sent_at, outbox.c.status)
            .where(outbox.c.sent_at.is_not(None))
            .order_by(outbox.c.sent_at)
            .limit(limit)
            .subquery("oldest")
        )
        past = (oldest.c.sent_at < self.cutoff(older_than_seconds), oldest.c.status == SENT)
        return select(func.count()).select_from(oldest).where(*past)

    def delivery_lag(self) -> Select[Any]:
        """How late delivery is: seconds since the oldest due row among the first
        :data:`LAG_PROBE_ROWS` unkeyed pending rows was written (NULL: none due), read where
        the unordered claim reads (``ix_outbox_pending``; MySQL: ``ix_outbox_status_seq_id``),
        so it costs a few index entries and rows whatever the table holds. Rows waiting for a
        retry are skipped; a head of more than that many of them reads as nothing due."""
        head = (
            select(outbox.c.created_at, outbox.c.next_retry_at)
            .where(outbox.c.status == PENDING, outbox.c.seq.is_(None))
            .order_by(outbox.c.id)
            .limit(LAG_PROBE_ROWS)
            .subquery("head")
        )
        due = or_(head.c.next_retry_at.is_(None), head.c.next_retry_at <= self.dialect.now())
        oldest = select(func.min(head.c.created_at)).where(due).scalar_subquery()
        return select(self.dialect.seconds_since(oldest))

    def oldest_sent_age(self) -> Select[Any]:
        """Seconds since the oldest sent row was sent (NULL: none), via ``ix_outbox_sent_at``."""
        oldest = select(func.min(outbox.c.sent_at)).where(outbox.c.sent_at.is_not(None))
        return select(self.dialect.seconds_since(oldest.scalar_subquery()))

    def cutoff(self, older_than_seconds: float) -> ColumnElement[Any]:
        """The database's now minus the retention, comparable with ``sent_at`` in an index."""
        return self.dialect.now_plus(literal(-float(older_than_seconds), Float))

    # -- the counts ----------------------------------------------------------------------------
    def sent_minutes(self) -> Select[Any]:
        """Per minute ago (0-59), the events counted sent and their mean and largest lag."""
        c = sent_counts.c
        ago = self.this_minute() - c.minute
        return (
            select(
                ago.label("minutes_ago"),
                func.sum(c.sent).label("sent"),
                type_coerce(func.sum(c.lag_sum) / func.sum(c.sent), Float).label("mean_lag"),
                func.max(c.lag_max).label("max_lag"),
            )
            .where(c.minute > self.this_minute() - 60)
            .group_by(c.minute)
        )

    def sent_counted(self) -> Select[Any]:
        """Events counted sent in the last ``b_minutes`` minutes."""
        c = sent_counts.c
        since = self.this_minute() - bindparam("b_minutes", type_=BigInteger)
        return select(func.coalesce(func.sum(c.sent), 0)).where(c.minute > since)

    def forget_counts(self) -> Delete:
        """Drop the counts of minutes older than ``b_minutes`` minutes."""
        since = self.this_minute() - bindparam("b_minutes", type_=BigInteger)
        return delete(sent_counts).where(sent_counts.c.minute <= since)


__all__ = ["SENT_PURGER", "RetentionStatements"]
