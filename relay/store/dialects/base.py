"""Statements every database shares; each dialect supplies its clock, locking and upserts.

The builders return SQLAlchemy Core statements and never execute them (except ``claim`` and
``next_seq``, which run several statements in the transaction they are given). A snapshot test
compiles each one per dialect.

A claim has two lanes. Unordered rows (``seq`` NULL) come from the oldest claimable ones. Ordered
rows come per key: its head is the row numbered ``outbox_progress.sent_seq + 1``; a claim locks
heads, then extends each into a run of the next numbers of its key, cut at the first number that
is missing (not committed yet) or not claimable. Its cost follows the number of keys, never the
number of rows waiting behind a head.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar, Concatenate, ParamSpec, TypeVar

from sqlalchemy import (
    ColumnElement,
    CompoundSelect,
    Connection,
    Delete,
    Float,
    Insert,
    Row,
    Select,
    String,
    Text,
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
    or_,
    select,
    true,
    tuple_,
    type_coerce,
    union_all,
    update,
)

from relay.records import Status
from relay.store.filters import EventFilter, like_pattern
from relay.store.schema import PARTIAL_INDEX_DIALECTS, audit, outbox, outbox_progress

#: The JSON columns a claim returns as text (see :meth:`Dialect.claim_columns`).
CLAIM_JSON = frozenset({"payload", "headers"})

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

#: A locked head or run row: enough to cut runs at their first gap.
_PLACE = (outbox.c.id, outbox.c.ordering_key, outbox.c.seq)


def lit(status: Status) -> ColumnElement[str]:
    """A status as an inline SQL literal, never a bound parameter: the planner must see it to
    use the partial index (a generic prepared plan cannot match ``status = $1`` to it)."""
    return literal_column(f"'{status.value}'", String)


PENDING, PROCESSING, SENT, FAILED = (lit(s) for s in Status)


P = ParamSpec("P")
T = TypeVar("T")
D = TypeVar("D", bound="Dialect")
#: Statements one dialect keeps built (claims of a few sizes, outcomes per worker): a bound.
STATEMENT_CACHE_SIZE = 256


def cached(method: Callable[Concatenate[D, P], T]) -> Callable[Concatenate[D, P], T]:
    """Build a hot-path statement once per dialect and arguments, not once per batch.

    Building a batch's statements with SQLAlchemy (expressions, the LATERAL probe, the cache
    key) cost the relay about 2.5 ms of CPU per batch: at batches of 100, 82 -> 56 µs an event
    with this cache (one in-process drain of 20,000 rows on PostgreSQL). A statement is
    immutable once built, so one object serves every connection and thread; the values that
    vary per execution are bind parameters.
    """
    name = method.__name__

    def built(self: D, /, *args: P.args, **kwargs: P.kwargs) -> T:
        cache: dict[Any, Any] = self.__dict__.setdefault("_statements", {})
        key = (name, args, tuple(sorted(kwargs.items())))
        statement = cache.get(key)
        if statement is None:
            if len(cache) >= STATEMENT_CACHE_SIZE:
                cache.clear()
            statement = cache[key] = method(self, *args, **kwargs)
        return statement

    functools.update_wrapper(built, method)
    return built


class Dialect:
    """SQL for one database. Subclasses implement the clock and the claim."""

    name: ClassVar[str] = "base"

    # -- the clock: database time only ------------------------------------------------------
    def now(self) -> ColumnElement[datetime]:
        """The database's current time."""
        raise NotImplementedError

    def now_plus(self, seconds: ColumnElement[float]) -> ColumnElement[datetime]:
        """The database's current time plus ``seconds`` (a float expression)."""
        raise NotImplementedError

    def seconds_since(self, column: ColumnElement[datetime]) -> ColumnElement[float]:
        """Seconds between ``column`` and the database's current time."""
        raise NotImplementedError

    # -- claim -------------------------------------------------------------------------------
    def json_text(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """A JSON ``column`` as the text the database stores, bypassing SQLAlchemy's JSON
        result processing: the store decodes it (SQLite and MySQL hand JSON over as text)."""
        return type_coerce(column, Text)

    def claim_columns(self) -> tuple[ColumnElement[Any], ...]:
        """The columns a claim returns: what the publisher needs and the fence, in the order
        of ``ClaimedEvent``'s fields (``ClaimedEvent.from_claims``); payload and headers as
        JSON text (:meth:`json_text`), which the store decodes in one pass over the batch."""
        return tuple(
            self.json_text(column).label(column.name) if column.name in CLAIM_JSON else column
            for column in (
                outbox.c.id,
                outbox.c.event_type,
                outbox.c.payload,
                outbox.c.headers,
                outbox.c.ordering_key,
                outbox.c.attempt,
                outbox.c.created_at,
                outbox.c.seq,
                outbox.c.event_id,
            )
        )

    def due(self) -> ColumnElement[bool]:
        """Unfinished rows a worker may take now: due pending rows and expired leases."""
        return and_(
            outbox.c.status.in_([PENDING, PROCESSING]),
            or_(self.pending_due(), self.lease_expired()),
        )

    def pending_due(self) -> ColumnElement[bool]:
        """Pending rows whose ``next_retry_at`` has passed (or was never set)."""
        return and_(
            outbox.c.status == PENDING,
            or_(outbox.c.next_retry_at.is_(None), outbox.c.next_retry_at <= self.now()),
        )

    def lease_expired(self) -> ColumnElement[bool]:
        """Processing rows whose holder's lease has run out."""
        return and_(outbox.c.status == PROCESSING, outbox.c.locked_until < self.now())

    def lock(self, stmt: Select[Any]) -> Select[Any]:
        """``stmt`` taking row locks on ``outbox`` and skipping rows others hold."""
        return stmt.with_for_update(skip_locked=True, of=outbox)

    def expired_unordered(self) -> ColumnElement[bool]:
        """Leases that ran out, in the form the lane of expired leases reads them.

        Where indexes can be partial, ``ix_outbox_leases`` covers the rows whose lease is set
        (``locked_until IS NOT NULL``, which ``locked_until < now()`` implies); the status test
        is written so that no index on status can serve it. As ``status = 'processing'`` the
        planner may read it through ``ix_outbox_unsent``: every row in flight, the walk that
        the lane exists to avoid."""
        if self.name not in PARTIAL_INDEX_DIALECTS:
            return self.lease_expired()
        return and_(
            func.coalesce(outbox.c.status, "") == PROCESSING,
            outbox.c.locked_until < self.now(),
        )

    def unordered_ids(self, limit: int, *, locked: bool = True) -> CompoundSelect[Any]:
        """The ids of up to ``limit`` claimable unordered rows (locked with :meth:`lock`, or
        not), oldest first. Two lanes of up to ``limit`` each, merged by id: expired leases, the
        earliest expired first, and due pending rows, oldest first. Each reads an index over its
        own status in that index's order (``ix_outbox_leases``, ``ix_outbox_pending``), so the
        claim never walks past the leases still running nor sorts more than it takes. Rows a
        lane locked but the merge left out stay locked only until the claim commits; the lane
        of expired leases is empty in normal operation."""
        lanes = []
        for due, order in (
            (self.expired_unordered(), (outbox.c.locked_until, outbox.c.id)),
            (self.pending_due(), (outbox.c.id,)),
        ):
            lane = select(outbox.c.id).where(outbox.c.seq.is_(None), due)
            lane = lane.order_by(*order).limit(limit)
            rows = (self.lock(lane) if locked else lane).subquery()
            lanes.append(select(rows.c.id))
        merged = union_all(*lanes)
        return merged.order_by(merged.selected_columns.id).limit(limit)

    @cached
    def heads_statement(self, limit: int) -> Select[Any]:
        """Claimable heads of their key (number ``sent_seq + 1``), oldest first, locked."""
        return self.lock(
            select(*_PLACE)
            .select_from(
                outbox_progress.join(
                    outbox,
                    and_(
                        outbox.c.ordering_key == outbox_progress.c.ordering_key,
                        outbox.c.seq == outbox_progress.c.sent_seq + 1,
                    ),
                )
            )
            .where(self.due())
            .order_by(outbox.c.id)
            .limit(limit)
        )

    @cached
    def run_statement(self) -> Select[Any]:
        """The claimable rows among ``(ordering_key, seq)`` pairs bound as ``places``, locked."""
        return self.lock(
            select(*_PLACE).where(
                tuple_(outbox.c.ordering_key, outbox.c.seq).in_(
                    bindparam("places", expanding=True)
                ),
                self.due(),
            )
        )

    def run_params(self, places: Sequence[tuple[str, int]]) -> dict[str, Any]:
        """The bind parameters of :meth:`run_statement`."""
        return {"places": list(places)}

    def claim_unordered(
        self, conn: Connection, *, worker: str, limit: int, lease_seconds: float
    ) -> list[Row[Any]]:
        """Lease up to ``limit`` of the oldest claimable unordered rows to ``worker``."""
        raise NotImplementedError

    def lease_ids(
        self, conn: Connection, ids: Sequence[int], *, worker: str, lease_seconds: float
    ) -> list[Row[Any]]:
        """Lease the rows ``ids`` (locked by this transaction) and return them as claimed."""
        raise NotImplementedError

    def claim(
        self, conn: Connection, *, worker: str, limit: int, lease_seconds: float
    ) -> list[Row[Any]]:
        """Lease up to ``limit`` rows to ``worker`` inside the open transaction: heads of keys
        and the runs behind them, and the oldest unordered rows; each lane gets at least half
        of the batch when the other has work."""
        heads = conn.execute(self.heads_statement(limit)).all()
        # Lease half the keys found (their runs grow to fill the batch) and leave the rest to
        # the next claim, this worker's pipelined one or another worker's: a backlog over a few
        # keys then moves through several workers at once instead of one.
        heads = heads[: (len(heads) + 1) // 2]
        unordered_limit = (limit - len(heads)) // (2 if heads else 1)
        rows: list[Row[Any]] = []
        if unordered_limit:
            rows = self.claim_unordered(
                conn, worker=worker, limit=unordered_limit, lease_seconds=lease_seconds
            )
        if not heads:
            return rows
        ids = [h.id for h in heads]
        share = (limit - len(rows)) // len(heads)
        places = [(h.ordering_key, h.seq + i) for h in heads for i in range(1, share)]
        if places:
            found = conn.execute(self.run_statement(), self.run_params(places)).all()
            ids += cut_runs(heads, found)
        left = limit - len(rows) - len(ids)
        if left > 0 and len(rows) == unordered_limit:
            # The runs were short and the unordered lane may have more: fill the batch.
            rows += self.claim_unordered(
                conn, worker=worker, limit=left, lease_seconds=lease_seconds
            )
        return rows + self.lease_ids(conn, ids, worker=worker, lease_seconds=lease_seconds)

    def lease_values(self, worker: str, lease_seconds: float) -> dict[str, Any]:
        """The SET clause of a claim."""
        return {
            "status": PROCESSING,
            "locked_by": worker,
            "locked_until": self.now_plus(bindparam("lease_seconds", lease_seconds, Float)),
            "attempt": outbox.c.attempt + 1,
            "updated_at": self.now(),
        }

    # -- completions: every one fenced on (id, attempt), status and locked_by ---------------
    def fence_params(self, keys: Sequence[tuple[int, int]]) -> dict[str, Any]:
        """The bind parameters of :meth:`_fence_many` for these ``(id, attempt)`` pairs."""
        return {"keys": list(keys)}

    def _fence_many(self, worker: str) -> ColumnElement[bool]:
        return and_(
            tuple_(outbox.c.id, outbox.c.attempt).in_(bindparam("keys", expanding=True)),
            outbox.c.status == PROCESSING,
            outbox.c.locked_by == worker,
        )

    def _fence_one(self) -> ColumnElement[bool]:
        return and_(
            outbox.c.id == bindparam("b_id"),
            outbox.c.attempt == bindparam("b_attempt"),
            outbox.c.status == PROCESSING,
            outbox.c.locked_by == bindparam("b_worker"),
        )

    @cached
    def mark_sent(self, worker: str) -> Update:
        """Confirmed rows become sent; bind ``keys`` = [(id, attempt), ...]."""
        now = self.now()
        return (
            update(outbox)
            .where(self._fence_many(worker))
            .values(status=SENT, sent_at=now, updated_at=now, locked_until=null())
        )

    @cached
    def reschedule(self) -> Update:
        """Failed rows with attempts left go back to pending after a per-row delay (executemany:
        ``b_id``, ``b_attempt``, ``b_worker``, ``b_delay``, ``b_error``)."""
        return (
            update(outbox)
            .where(self._fence_one())
            .values(
                status=PENDING,
                next_retry_at=self.now_plus(bindparam("b_delay", type_=Float)),
                last_error=bindparam("b_error"),
                locked_by=null(),
                locked_until=null(),
                updated_at=self.now(),
            )
        )

    @cached
    def bury(self) -> Update:
        """Rows that failed their last attempt become ``failed`` (executemany: ``b_id``,
        ``b_attempt``, ``b_worker``, ``b_error``)."""
        return (
            update(outbox)
            .where(self._fence_one())
            .values(
                status=FAILED,
                last_error=bindparam("b_error"),
                locked_until=null(),
                updated_at=self.now(),
            )
        )

    @cached
    def release(self, worker: str) -> Update:
        """Give rows back without spending their attempt (broker unreachable); bind ``keys``,
        ``delay`` and ``error``."""
        return (
            update(outbox)
            .where(self._fence_many(worker))
            .values(
                status=PENDING,
                attempt=outbox.c.attempt - 1,
                next_retry_at=self.now_plus(bindparam("delay", type_=Float)),
                last_error=bindparam("error"),
                locked_by=null(),
                locked_until=null(),
                updated_at=self.now(),
            )
        )

    # -- per-key progress: the relay's side of the fence -----------------------------------
    def progress_statement(self) -> Select[Any]:
        """Progress of the keys bound as ``keys``, row-locked, in key order."""
        stmt = (
            select(outbox_progress.c.ordering_key, outbox_progress.c.sent_seq)
            .where(outbox_progress.c.ordering_key.in_(bindparam("keys", expanding=True)))
            .order_by(outbox_progress.c.ordering_key)
        )
        return stmt.with_for_update()

    def set_progress(self, moves: Mapping[str, int]) -> Update:
        """Set each key's progress to its number in ``moves``, in one statement (the rows are
        locked by this transaction)."""
        return (
            update(outbox_progress)
            .where(outbox_progress.c.ordering_key.in_(list(moves)))
            .values(
                sent_seq=case(
                    dict(moves),
                    value=outbox_progress.c.ordering_key,
                    else_=outbox_progress.c.sent_seq,
                )
            )
        )

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
        """The rows an operator's filter selects (``relay.store.filters``)."""
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
            return self.now_plus(literal(-when.total_seconds(), Float))
        return when

    def list_events(
        self, matching: ColumnElement[bool], limit: int, after: int | None
    ) -> Select[Any]:
        """Rows ``matching`` selects, by id from just after ``after`` (keyset, never OFFSET)."""
        stmt = select(*EVENT_COLUMNS).where(matching)
        if after is not None:
            stmt = stmt.where(outbox.c.id > after)
        return stmt.order_by(outbox.c.id).limit(limit)

    def count_matching(self, matching: ColumnElement[bool]) -> Select[Any]:
        """How many rows ``matching`` selects."""
        return select(func.count()).select_from(outbox).where(matching)

    # -- per-key sequence: the producers' side of the fence ----------------------------------
    def next_seq(self, conn: Connection, key: str) -> int:
        """Lock key ``key``'s sequence row until the transaction ends and take its next number;
        the key's first number also creates its progress row."""
        seq = int(conn.execute(self.take_seq(), {"key": key}).scalar_one())
        if seq == 1:
            conn.execute(self.start_progress(), {"key": key})
        return seq

    def take_seq(self) -> Any:
        """Insert key ``key`` at 1 or increment it, returning its number."""
        raise NotImplementedError

    def reserve_key(self) -> Any:
        """Lock key ``key``'s sequence row, creating it at 0, without taking a number."""
        raise NotImplementedError

    def start_progress(self) -> Any:
        """Create key ``key``'s progress row at 0 unless it exists."""
        raise NotImplementedError

    def held(self, worker: str) -> Select[Any]:
        """Ids of the rows ``worker`` still holds among those bound as for :meth:`renew`."""
        return select(outbox.c.id).where(self._fence_many(worker))

    @cached
    def renew(self, worker: str) -> Update:
        """Extend the lease of rows still held; bind ``keys`` and ``lease_seconds``."""
        return (
            update(outbox)
            .where(self._fence_many(worker))
            .values(locked_until=self.now_plus(bindparam("lease_seconds", type_=Float)))
        )

    # -- operations ------------------------------------------------------------------------
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
        return select(self.seconds_since(oldest))

    def expired_leases(self) -> Select[Any]:
        """How many processing rows have an expired lease."""
        return select(func.count()).where(
            outbox.c.status == PROCESSING, outbox.c.locked_until < self.now()
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
            capped(outbox.c.status == PROCESSING, outbox.c.locked_until < self.now()).label(
                "expired_leases"
            ),
            self.seconds_since(oldest.scalar_subquery()).label("oldest_pending_age"),
        )

    def backlog(self, limit: int) -> Select[Any]:
        """How many unordered rows and heads of keys are claimable now, counting each no
        further than ``limit`` (bounded scans)."""
        unordered = self.unordered_ids(limit, locked=False).subquery()
        heads = (
            select(outbox.c.id)
            .select_from(
                outbox_progress.join(
                    outbox,
                    and_(
                        outbox.c.ordering_key == outbox_progress.c.ordering_key,
                        outbox.c.seq == outbox_progress.c.sent_seq + 1,
                    ),
                )
            )
            .where(self.due())
            .limit(limit)
            .subquery()
        )
        return select(
            select(func.count()).select_from(unordered).scalar_subquery()
            + select(func.count()).select_from(heads).scalar_subquery()
        )

    def try_lock(self, conn: Connection, key: int) -> bool:
        """Take the exclusive lock ``key`` until the open transaction ends, if it is free.

        The base has no such lock and says yes: its callers must be harmless when run twice.
        """
        return True

    def retry_failed(self, matching: ColumnElement[bool]) -> Update:
        """The failed rows ``matching`` selects go back to pending with fresh attempts."""
        stmt = update(outbox).where(outbox.c.status == FAILED, matching)
        return stmt.values(
            status=PENDING,
            attempt=0,
            next_retry_at=null(),
            locked_by=null(),
            locked_until=null(),
            updated_at=self.now(),
        )

    def purge_failed(self, matching: ColumnElement[bool]) -> Delete:
        """Delete the failed rows ``matching`` selects."""
        return delete(outbox).where(outbox.c.status == FAILED, matching)

    def purge_sent_matching(self, matching: ColumnElement[bool]) -> Delete:
        """Delete the sent rows ``matching`` selects (an operator's purge by filter)."""
        return delete(outbox).where(outbox.c.status == SENT, matching)

    def event_details(self, matching: ColumnElement[bool]) -> Select[Any]:
        """Every column of the rows ``matching`` selects (one event's page)."""
        return select(outbox).where(matching).order_by(outbox.c.id).limit(2)

    def sent_per_minute(self) -> Select[Any]:
        """The last hour's sent rows per minute ago (0-59), with their mean and largest
        commit-to-sent lag in seconds; reads that hour only, through ``ix_outbox_sent_at``."""
        ago = func.floor(self.seconds_since(outbox.c.sent_at) / literal_column("60.0"))
        lag = self.seconds_since(outbox.c.created_at) - self.seconds_since(outbox.c.sent_at)
        return (
            select(
                ago.label("minutes_ago"),
                func.count().label("sent"),
                func.avg(lag).label("mean_lag"),
                func.max(lag).label("max_lag"),
            )
            .where(outbox.c.sent_at >= self.now_plus(literal(-3600.0, Float)))
            .group_by(ago)
        )

    def leases_by_holder(self) -> Select[Any]:
        """Processing rows per lease holder: how many, how many expired, first and last expiry."""
        expired = case((outbox.c.locked_until < self.now(), 1), else_=0)
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

    def purge_sent(self, older_than_seconds: float, limit: int) -> Delete:
        """Delete up to ``limit`` sent rows older than the retention, oldest first."""
        victims = (
            select(outbox.c.id)
            .where(
                outbox.c.status == SENT,
                self.seconds_since(outbox.c.sent_at) > older_than_seconds,
            )
            .order_by(outbox.c.id)
            .limit(limit)
        )
        return delete(outbox).where(outbox.c.id.in_(victims.scalar_subquery()))


def cut_runs(heads: Sequence[Any], found: Sequence[Any]) -> list[int]:
    """Ids of ``found`` rows that extend their head's run without a gap, in key order: a run
    stops at the first number missing (uncommitted, locked by another claimer, not due)."""
    by_place = {(r.ordering_key, r.seq): r.id for r in found}
    ids: list[int] = []
    for head in heads:
        seq = head.seq + 1
        while (head.ordering_key, seq) in by_place:
            ids.append(by_place[(head.ordering_key, seq)])
            seq += 1
    return ids
