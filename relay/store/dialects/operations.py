"""The operator's and the reports' statements: status, gauges, lists, retry and purge, audit,
heartbeats, retention.

:class:`Operations` borrows a dialect's clock (``relay.store.dialects.dispatch_path``); a database
whose SQL differs subclasses it in its own module. Nothing on the dispatch path runs these.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    CompoundSelect,
    Connection,
    Delete,
    Float,
    Insert,
    Select,
    Update,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal,
    literal_column,
    null,
    select,
    true,
    type_coerce,
    union_all,
    update,
)

from relay.store.dialects.clock import FAILED, PENDING, PROCESSING, SENT, lit
from relay.store.dialects.dispatch_path import CLAIM_JSON, Dialect
from relay.store.operations.filters import EventFilter, like_pattern
from relay.store.schema.tables import audit, heartbeats, outbox, outbox_progress
from relay.store.timestamps import UtcDateTime

#: What an operator sees of a row in a list (not the payload: `relay failed list` is a table).
EVENT_COLUMNS = (
    outbox.c.id,
    outbox.c.event_type,
    outbox.c.ordering_key,
    outbox.c.status,
    outbox.c.attempt,
    outbox.c.last_error,
    outbox.c.locked_by,
    outbox.c.locked_until,
    outbox.c.next_retry_at,
    outbox.c.created_at,
    outbox.c.updated_at,
)


class Operations:
    """SQL of the operator's verbs over one database, on that database's clock."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def advance(self) -> Update:
        """Move key ``b_key``'s progress from ``b_from`` to ``b_to`` (executemany)."""
        return (
            update(outbox_progress)
            .where(
                outbox_progress.c.ordering_key == bindparam("b_key"),
                outbox_progress.c.sent_seq == bindparam("b_from"),
            )
            .values(sent_seq=bindparam("b_to"))
        )

    def failed_places(self, matching: ColumnElement[bool]) -> Select[Any]:
        """Keys and numbers of the failed ordered rows ``matching`` selects: purging a failed
        head moves its key's progress past it."""
        return select(outbox.c.ordering_key, outbox.c.seq).where(
            outbox.c.status == FAILED, outbox.c.seq.is_not(None), matching
        )

    def matching(self, f: EventFilter) -> ColumnElement[bool]:
        """The rows an operator's filter selects (``relay.store.operations.filters``)."""
        conditions: list[ColumnElement[bool]] = []
        if f.statuses:
            conditions.append(outbox.c.status.in_([lit(s) for s in f.statuses]))
        if f.ids:
            conditions.append(outbox.c.id.in_(f.ids))
        if f.event_type is not None:
            conditions.append(outbox.c.event_type.like(like_pattern(f.event_type), escape="\\"))
        if f.key is not None:
            conditions.append(outbox.c.ordering_key == f.key)
        if f.error is not None:
            conditions.append(
                func.lower(outbox.c.last_error).contains(f.error.lower(), autoescape=True)
            )
        if f.since is not None:
            conditions.append(outbox.c.created_at >= self._instant(f.since))
        if f.until is not None:
            conditions.append(outbox.c.created_at < self._instant(f.until))
        return and_(true(), *conditions)

    def _instant(self, when: datetime | timedelta) -> ColumnElement[datetime] | datetime:
        if isinstance(when, timedelta):
            return self.dialect.now_plus(literal(-when.total_seconds(), Float))
        return when

    def list_events(
        self, matching: ColumnElement[bool], limit: int, after: int | None
    ) -> Select[Any]:
        """Rows ``matching`` selects, by id from just after ``after`` (keyset, never OFFSET)."""
        stmt = select(*self._readable(EVENT_COLUMNS)).where(matching)
        if after is not None:
            stmt = stmt.where(outbox.c.id > after)
        return stmt.order_by(outbox.c.id).limit(limit)

    def sent_rows(self, matching: ColumnElement[bool], after: int, horizon: int) -> Select[Any]:
        """Sent rows ``matching`` selects, as a claim returns them, with ids in ``(after,
        horizon]``, by id: a replay's page, a bounded range of the primary key whatever the
        planner's statistics say (never OFFSET, never a sort of the whole history)."""
        return (
            select(*self.dialect.claim_columns())
            .where(outbox.c.status == SENT, matching, outbox.c.id > after, outbox.c.id <= horizon)
            .order_by(outbox.c.id)
        )

    def sent_extent(
        self, matching: ColumnElement[bool], after: int | None
    ) -> Select[int, Any, Any]:
        """How many sent rows ``matching`` selects after id ``after``, and the first and last
        one's ids: a replay's size and range."""
        where = [outbox.c.status == SENT, matching]
        if after is not None:
            where.append(outbox.c.id > after)
        return select(func.count(), func.min(outbox.c.id), func.max(outbox.c.id)).where(*where)

    def count_matching(self, matching: ColumnElement[bool]) -> Select[Any]:
        """How many rows ``matching`` selects."""
        return select(func.count()).select_from(outbox).where(matching)

    def count_by_status(self) -> CompoundSelect[Any]:
        """Rows per unsent status, and every row as ``total`` (sent = total - the rest): the
        unsent ones read the partial index, the total the primary key, never the history."""
        unsent = (
            select(outbox.c.status, func.count())
            .where(outbox.c.status.in_([PENDING, PROCESSING, FAILED]))
            .group_by(outbox.c.status)
        )
        return union_all(
            unsent, select(literal_column("'total'"), func.count()).select_from(outbox)
        )

    def oldest_pending_age(self) -> Select[Any]:
        """Age in seconds of the oldest pending row (NULL when none)."""
        oldest = (
            select(func.min(outbox.c.created_at))
            .where(outbox.c.status == PENDING)
            .scalar_subquery()
        )
        return select(self.dialect.seconds_since(oldest))

    def expired_leases(self) -> Select[Any]:
        """How many processing rows have an expired lease."""
        return select(func.count()).where(
            outbox.c.status == PROCESSING, outbox.c.locked_until < self.dialect.now()
        )

    def gauges(self, limit: int) -> Select[Any]:
        """Metrics' one read: capped counts per unfinished status and expired leases, oldest age.

        Each count stops at ``limit`` rows (a bounded scan)."""

        # Restating the partial index's predicate lets every planner (SQLite's included) read
        # ix_outbox_unsent instead of the table.
        unsent = outbox.c.status.in_([PENDING, PROCESSING, FAILED])

        def capped(*where: ColumnElement[bool]) -> Any:
            rows = select(outbox.c.id).where(unsent, *where).limit(limit).subquery()
            return select(func.count()).select_from(rows).scalar_subquery()

        oldest = select(func.min(outbox.c.created_at)).where(unsent, outbox.c.status == PENDING)
        return select(
            capped(outbox.c.status == PENDING).label("pending"),
            capped(outbox.c.status == PROCESSING).label("processing"),
            capped(outbox.c.status == FAILED).label("failed"),
            capped(outbox.c.status == PROCESSING, outbox.c.locked_until < self.dialect.now()).label(
                "expired_leases"
            ),
            self.dialect.seconds_since(oldest.scalar_subquery()).label("oldest_pending_age"),
        )

    def try_lock(self, conn: Connection, key: int) -> bool:
        """Take the exclusive lock ``key`` until the open transaction ends, if it is free.

        The base has no such lock and says yes: its callers must be harmless when run twice.
        """
        return True

    def retry_failed(
        self,
        matching: ColumnElement[bool],
        *,
        clear_expiry: bool = False,
        new_expiry: float | None = None,
    ) -> Update:
        """The failed rows ``matching`` selects go back to pending with fresh attempts; their
        deadline cleared (``clear_expiry``) or set ``b_expires_seconds`` after the database's
        now (``new_expiry`` given), else kept."""
        stmt = update(outbox).where(outbox.c.status == FAILED, matching)
        values: dict[str, Any] = {}
        if clear_expiry:
            values["expires_at"] = null()
        elif new_expiry is not None:
            values["expires_at"] = self.dialect.now_plus(bindparam("b_expires_seconds", Float))
        return stmt.values(
            status=PENDING,
            attempt=0,
            next_retry_at=null(),
            locked_by=null(),
            locked_until=null(),
            updated_at=self.dialect.now(),
            **values,
        )

    def purge_failed(self, matching: ColumnElement[bool]) -> Delete:
        """Delete the failed rows ``matching`` selects."""
        return delete(outbox).where(outbox.c.status == FAILED, matching)

    def purge_sent_matching(self, matching: ColumnElement[bool]) -> Delete:
        """Delete the sent rows ``matching`` selects (an operator's purge by filter)."""
        return delete(outbox).where(outbox.c.status == SENT, matching)

    def event_details(self, matching: ColumnElement[bool]) -> Select[Any]:
        """Every column of the rows ``matching`` selects, JSON as stored text (one event's page).

        ``relay.store.operations.readable`` decodes payload and headers as a claim does."""
        columns = [
            self.dialect.json_text(c).label(c.name) if c.name in CLAIM_JSON else c
            for c in self._readable(outbox.c)
        ]
        return select(*columns).where(matching).order_by(outbox.c.id).limit(2)

    def _readable(self, columns: Iterable[ColumnElement[Any]]) -> list[ColumnElement[Any]]:
        """``columns`` with ``created_at`` read as a claim reads it: a dead letter whose time
        is no time Python holds is still listed (``created_at`` None)."""
        created = outbox.c.created_at
        return [
            self.dialect.readable_time(c).label("created_at") if c is created else c
            for c in columns
        ]

    def sent_per_minute(self) -> Select[Any]:
        """The last hour's sent rows per minute ago (0-59), with their mean and largest
        commit-to-sent lag in seconds; reads that hour only, through ``ix_outbox_sent_at``."""
        ago = func.floor(self.dialect.seconds_since(outbox.c.sent_at) / literal_column("60.0"))
        lag = self.dialect.seconds_since(outbox.c.created_at) - self.dialect.seconds_since(
            outbox.c.sent_at
        )
        return (
            select(
                ago.label("minutes_ago"),
                func.count().label("sent"),
                func.avg(lag).label("mean_lag"),
                func.max(lag).label("max_lag"),
            )
            .where(outbox.c.sent_at >= self.dialect.now_plus(literal(-3600.0, Float)))
            .group_by(ago)
        )

    def leases_by_holder(self) -> Select[Any]:
        """Processing rows per lease holder: how many, how many expired, first and last expiry."""
        expired = case((outbox.c.locked_until < self.dialect.now(), 1), else_=0)
        return (
            select(
                outbox.c.locked_by,
                func.count().label("rows"),
                func.sum(expired).label("expired"),
                func.min(outbox.c.locked_until).label("first_expiry"),
                func.max(outbox.c.locked_until).label("last_expiry"),
            )
            .where(outbox.c.status == PROCESSING)
            .group_by(outbox.c.locked_by)
            .order_by(outbox.c.locked_by)
        )

    def record_action(self) -> Insert:
        """One audit row: who did what, to which rows, how many (bind every column but id, at)."""
        return insert(audit)

    def audit_page(self, limit: int, after: int | None) -> Select[Any]:
        """Audit rows, newest first, from just before ``after`` (keyset by id)."""
        stmt = select(audit)
        if after is not None:
            stmt = stmt.where(audit.c.id < after)
        return stmt.order_by(audit.c.id.desc()).limit(limit)

    def oldest_past_retention(self, older_than_seconds: float, limit: int) -> Select[Any]:
        """Ids of the sent rows older than the retention among the ``limit`` oldest rows that
        carry a ``sent_at`` (oldest first through ``ix_outbox_sent_at``).

        The retention and the status are tested after the LIMIT, so no row estimate of theirs
        can steer the plan: tested inside it, on a queue table whose statistics lag (most rows
        pending when last analyzed), the planner took the sent rows past the retention for a
        few hundred, read the whole table and sorted it, 0.17 s a batch of 2,000 at 270,000
        rows, instead of the index's first entries."""
        oldest = (
            select(outbox.c.id, outbox.c.sent_at, outbox.c.status)
            .where(outbox.c.sent_at.is_not(None))
            .order_by(outbox.c.sent_at)
            .limit(limit)
            .subquery("oldest")
        )
        cutoff = self.dialect.now_plus(literal(-older_than_seconds, Float))
        return select(oldest.c.id).where(oldest.c.sent_at < cutoff, oldest.c.status == SENT)

    def purge_sent(self, older_than_seconds: float, limit: int) -> Delete:
        """Delete up to ``limit`` sent rows older than the retention, oldest first (a range of
        ``ix_outbox_sent_at`` from its start, so a batch reads only the rows it deletes)."""
        victims = self.oldest_past_retention(older_than_seconds, limit)
        return delete(outbox).where(outbox.c.id.in_(victims.scalar_subquery()))

    def beat_update(self) -> Update:
        """Set heartbeat ``b_name``'s time to the database's now (0 rows: not there yet)."""
        stmt = update(heartbeats).where(heartbeats.c.name == bindparam("b_name"))
        return stmt.values(beat_at=self.dialect.now())

    def beat_insert(self) -> Insert:
        """Heartbeat ``b_name``'s first row, at the database's now."""
        return insert(heartbeats).values(name=bindparam("b_name"), beat_at=self.dialect.now())

    def beat_ages(self) -> Select[Any]:
        """Each heartbeat's name and seconds since it beat."""
        return select(heartbeats.c.name, self.dialect.seconds_since(heartbeats.c.beat_at))

    # -- the doctor's readings --------------------------------------------------------------
    def clock_reading(self) -> Select[Any]:
        """The database's clock, as an aware UTC timestamp (the doctor's skew check)."""
        return select(type_coerce(self.dialect.now(), UtcDateTime()))

    def unroutable_types(self, limit: int) -> Select[Any]:
        """Event types with rows waiting or failed as unroutable, and how many, up to ``limit``."""
        return (
            select(outbox.c.event_type, func.count())
            .where(outbox.c.status.in_((PENDING, FAILED)), outbox.c.last_error.like("unroutable%"))
            .group_by(outbox.c.event_type)
            .limit(limit)
        )
