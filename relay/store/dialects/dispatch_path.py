"""The dispatch path's statements (claim, outcomes, leases, per-key progress); each dialect
supplies its clock, locking and upserts.

They sit on top of the application's (``relay.store.dialects.caller_transaction``) and the outcomes'
(``relay.store.dialects.fenced_updates``); the operator's queries are in
``relay.store.dialects.operations``. The builders return SQLAlchemy Core
statements and never execute them (except ``claim``, which runs several statements in the
transaction it is given). A snapshot test compiles each one per dialect.

A claim has two lanes. Unordered rows (``seq`` NULL) come from the oldest claimable ones. Ordered
rows come per key: its head is the row numbered ``outbox_progress.sent_seq + 1``; a claim locks
heads, then extends each into a run of the next numbers of its key, cut at the first number that
is missing (not committed yet) or not claimable. Its cost follows the number of keys, never the
number of rows waiting behind a head.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ColumnElement,
    CompoundSelect,
    Connection,
    Float,
    FromClause,
    Insert,
    Row,
    Select,
    Text,
    Update,
    and_,
    bindparam,
    case,
    func,
    null,
    or_,
    select,
    tuple_,
    type_coerce,
    union_all,
    update,
)

from relay.ordering import cut_runs
from relay.store.dialects.caller_transaction import InboxStatements, ProducerStatements
from relay.store.dialects.clock import PENDING, PROCESSING, cached
from relay.store.dialects.fenced_updates import OutcomeStatements
from relay.store.dialects.holding import HeldRows
from relay.store.dialects.keys import KeyHeads
from relay.store.dispatch_path.claimsize import Ask, RunEnd, fit_bytes, rows_bytes
from relay.store.dispatch_path.holds import NO_HOLD, Hold
from relay.store.schema.tables import PARTIAL_INDEX_DIALECTS, outbox, outbox_progress
from relay.store.timestamps import ReadTimestamp

#: The JSON columns a claim returns as text (see :meth:`Dialect.claim_columns`).
CLAIM_JSON = frozenset({"payload", "headers"})

#: A locked head or run row: enough to cut runs at their first gap.
_PLACE = (outbox.c.id, outbox.c.ordering_key, outbox.c.seq)
#: The claim's byte bound (``RELAY_BATCH_MAX_BYTES``, or what is left of it), bound per claim,
#: and whether its first row counts whatever its size (so an oversized row is not stranded).
MAX_BYTES = bindparam("max_bytes", type_=BigInteger)
FIRST_ANYWAY = bindparam("first_anyway", type_=Boolean)
#: Where a held claim's lane of pending rows starts (``relay.store.dispatch_path.floors``).
FLOOR = bindparam("floor", type_=BigInteger)


class Dialect(ProducerStatements, InboxStatements, OutcomeStatements, KeyHeads, HeldRows):
    """SQL for one database. Subclasses implement the clock, the claim and the upserts."""

    def _upsert_sent_counts(self, values: dict[str, Any]) -> Insert:
        """Insert a row of ``outbox_sent_counts``, or add it to the row of its minute and
        shard (``relay.store.dialects.purge.RetentionStatements.count_sent``)."""
        raise NotImplementedError

    # -- claim -------------------------------------------------------------------------------
    def json_text(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """A JSON ``column`` as the text the database stores, bypassing SQLAlchemy's JSON
        result processing: the store decodes it (SQLite and MySQL hand JSON over as text)."""
        return type_coerce(column, Text)

    def claim_columns(self) -> tuple[ColumnElement[Any], ...]:
        """The columns a claim returns: what the publisher needs and the fence, in the order
        of ``ClaimedEvent``'s fields (``ClaimedEvent.from_claims``); payload and headers as
        JSON text (:meth:`json_text`), which the store decodes in one pass over the batch;
        then whether the row's deadline has passed by the database's clock
        (:meth:`past_deadline`) and, only for such a row, that deadline (NULL for every other
        row: a claim reads no time it does not need)."""
        expired = self.past_deadline()
        return (
            *self._row_columns(),
            type_coerce(expired, Boolean).label("expired"),
            self.readable_time(case((expired, outbox.c.expires_at), else_=null())).label(
                "expires_at"
            ),
        )

    def _row_columns(self) -> tuple[ColumnElement[Any], ...]:
        return tuple(
            self.json_text(column).label(column.name)
            if column.name in CLAIM_JSON
            else self.readable_time(column).label(column.name)
            if column is outbox.c.created_at
            else column
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

    def past_deadline(self) -> ColumnElement[bool]:
        """Whether a row's ``expires_at`` is set and has passed by the database's clock: such
        a row is dead-lettered at claim, never published."""
        return and_(outbox.c.expires_at.is_not(None), outbox.c.expires_at <= self.now())

    def readable_time(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """A time ``column`` a producer writes, read so that no value it holds raises
        (:class:`~relay.store.timestamps.ReadTimestamp`): the row's fault, not the claim's."""
        return type_coerce(column, ReadTimestamp())

    def text_bytes(self, text: ColumnElement[Any]) -> ColumnElement[int]:
        """The length in bytes of ``text`` (UTF-8)."""
        return func.octet_length(text)

    def row_bytes(self, table: FromClause = outbox) -> ColumnElement[int]:
        """A row's payload and headers in bytes, as the JSON text a claim returns them: what
        ``RELAY_BATCH_MAX_BYTES`` counts (of ``table``: ``outbox`` or an alias of it)."""
        return self.text_bytes(self.json_text(table.c.payload)) + func.coalesce(
            self.text_bytes(self.json_text(table.c.headers)), 0
        )

    def place(self) -> tuple[ColumnElement[Any], ...]:
        """A locked head or run row as a claim reads it: its place and its size in bytes."""
        return (*_PLACE, self.row_bytes().label("size"))

    def due(self, hold: Hold = NO_HOLD) -> ColumnElement[bool]:
        """Unfinished rows a worker may take now: due pending rows and expired leases, but
        none that ``hold`` holds back."""
        return and_(
            outbox.c.status.in_([PENDING, PROCESSING]),
            or_(self.pending_due(), self.lease_expired()),
            *self.holding(hold),
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

    def unordered_ids(
        self,
        limit: int,
        *,
        locked: bool = True,
        expired: bool = True,
        sized: bool = False,
        hold: Hold = NO_HOLD,
        floored: bool = False,
    ) -> CompoundSelect[Any] | Select[Any]:
        """The ids of up to ``limit`` claimable unordered rows (locked with :meth:`lock`, or
        not), oldest first. Two lanes of up to ``limit`` each, merged by id: expired leases, the
        earliest expired first, and due pending rows, oldest first. Each reads an index over its
        own status in that index's order (``ix_outbox_leases``, ``ix_outbox_pending``), so the
        claim never walks past the leases still running nor sorts more than it takes. Rows a
        lane locked but the merge left out stay locked only until the claim commits; the lane
        of expired leases is empty in normal operation, but on PostgreSQL its index range is
        not (an entry per row claimed since the last vacuum), so a claim reads it only when
        ``expired`` (:class:`relay.store.dispatch_path.lease_sweep.LeaseSweep`): without, the
        pending lane alone.
        ``sized`` adds each row's size (:meth:`row_bytes`), read while the lane holds it;
        rows ``hold`` holds back are skipped (:meth:`holding`); ``floored``, the pending lane
        starts at the id bound as ``floor`` (:meth:`pending_lane`)."""
        wanted: list[tuple[ColumnElement[bool], tuple[ColumnElement[Any], ...]]] = [
            (self.pending_lane(floored), (outbox.c.id,))
        ]
        if expired:
            wanted.insert(0, (self.expired_unordered(), (outbox.c.locked_until, outbox.c.id)))
        columns: tuple[ColumnElement[Any], ...] = (outbox.c.id,)
        if sized:
            columns += (self.row_bytes().label("size"),)
        lanes = []
        for due, order in wanted:
            lane = select(*columns).where(outbox.c.seq.is_(None), due, *self.holding(hold))
            lane = lane.order_by(*order).limit(limit)
            rows = (self.lock(lane) if locked else lane).subquery()
            lanes.append(select(*rows.c))
        if len(lanes) == 1:
            return lanes[0]
        merged = union_all(*lanes)
        return merged.order_by(merged.selected_columns.id).limit(limit)

    def pending_lane(self, floored: bool) -> ColumnElement[bool]:
        """Due pending rows; ``floored``, only from the id bound as ``floor`` on: a held claim
        then starts past the rows it holds back instead of stepping over them
        (``relay.store.dispatch_path.floors``)."""
        due = self.pending_due()
        return and_(due, outbox.c.id >= FLOOR) if floored else due

    def floor_params(self, floor: int | None) -> dict[str, Any]:
        """The bind parameters of a statement built ``floored`` (none otherwise)."""
        return {} if floor is None else {"floor": floor}

    def within_bytes(
        self, picked: CompoundSelect[Any] | Select[Any], *, late: bool = False
    ) -> Select[Any]:
        """The ids of ``picked`` (``id``, ``size``; ``late``: ``id`` alone) up to the byte bound,
        oldest first: a running total of sizes in id order, kept while it stays within
        ``max_bytes``; the first row whatever its size when ``first_anyway`` is bound true.
        The window runs a level above the lanes' locking reads (no window function may share
        a level with FOR UPDATE), over the at most ``limit`` rows they locked (those it leaves
        out stay locked until the claim commits). ``late`` reads the sizes there, a key lookup
        per row, so no other row is sized whatever the lanes' plan (a sort of every pending
        row, on a table never analyzed, sized the whole backlog): ``ClaimFit.size_late``."""
        rows = picked.subquery()
        if late:  # a subquery per row: a join may hash the whole table; OFFSET 0 sizes once
            read = outbox.alias("sized_row")
            size = select(self.row_bytes(read)).where(read.c.id == rows.c.id).scalar_subquery()
            rows = select(rows.c.id, size.label("size")).offset(0).subquery()
        total = func.sum(rows.c.size).over(order_by=rows.c.id)
        sized = select(rows.c.id, rows.c.size, total.label("upto")).subquery()
        first = and_(sized.c.upto == sized.c.size, FIRST_ANYWAY)
        return select(sized.c.id).where(or_(sized.c.upto <= MAX_BYTES, first))

    @cached
    def heads_statement(self, limit: int, hold: Hold = NO_HOLD) -> Select[Any]:
        """Claimable heads of their key (number ``sent_seq + 1``), oldest first, locked."""
        heads = self._due_heads(*self.place(), hold=hold)
        return self.lock(heads.order_by(outbox.c.id).limit(limit))

    def _due_heads(self, *columns: ColumnElement[Any], hold: Hold = NO_HOLD) -> Select[Any]:
        """``columns`` of each key's head (number ``sent_seq + 1``) that is claimable now."""
        head = and_(
            outbox.c.ordering_key == outbox_progress.c.ordering_key,
            outbox.c.seq == outbox_progress.c.sent_seq + 1,
        )
        joined = outbox_progress.join(outbox, head)
        return select(*columns).select_from(joined).where(self.due(hold))

    @cached
    def run_statement(self, hold: Hold = NO_HOLD) -> Select[Any]:
        """The claimable rows among ``(ordering_key, seq)`` pairs bound as ``places``, locked."""
        return self.lock(
            select(*self.place()).where(
                tuple_(outbox.c.ordering_key, outbox.c.seq).in_(
                    bindparam("places", expanding=True)
                ),
                self.due(hold),
            )
        )

    def run_params(self, places: Sequence[tuple[str, int]]) -> dict[str, Any]:
        """The bind parameters of :meth:`run_statement`."""
        return {"places": list(places)}

    def claim_unordered(self, conn: Connection, ask: Ask) -> list[Row[Any]]:
        """Lease up to ``ask.limit`` of the oldest claimable unordered rows (:class:`Ask`)."""
        raise NotImplementedError

    def bound_params(self, max_bytes: int | None, first_anyway: bool) -> dict[str, Any]:
        """The bind parameters of a claim statement built ``sized`` (none when unbounded)."""
        if max_bytes is None:
            return {}
        return {"max_bytes": max_bytes, "first_anyway": first_anyway}

    @cached
    def lease_statement(self, *, worker: str, lease_seconds: float) -> Update:
        """Lease the picked rows; bind ``ids``."""
        return (
            update(outbox)
            .where(self._bound_ids())
            .values(**self.lease_values(worker, lease_seconds))
        )

    def _bound_ids(self) -> ColumnElement[bool]:
        """The rows whose ids are bound as ``ids``."""
        return outbox.c.id.in_(bindparam("ids", expanding=True))

    def ids_params(self, ids: Sequence[int]) -> dict[str, Any]:  # of :meth:`_bound_ids`
        return {"ids": list(ids)}

    def lease_ids(self, conn: Connection, ids: Sequence[int], ask: Ask) -> list[Row[Any]]:
        """Lease the rows ``ids`` (locked here) as ``ask`` says; return them as claimed."""
        raise NotImplementedError

    def claim(self, conn: Connection, ask: Ask) -> list[Row[Any]]:
        """Lease up to ``ask.limit`` rows in the open transaction: heads of keys and their
        runs, and the oldest unordered rows (unordered expired leases only when
        ``ask.expired``; a key's expired head is always found); each lane gets at least half
        of the batch when the other has work. When no head is free (no hoarding), the runs
        in flight of ``ask.following`` go on from their last number, as runs behind heads do.
        With ``max_bytes`` the rows' payload and headers add up to no more than that, but each
        lane takes its first row whatever its size (never stranded): the heads get up to half
        of the bytes, the unordered rows what the heads left, the runs what is left then."""
        limit, max_bytes = ask.limit, ask.max_bytes
        heads = conn.execute(self.heads_statement(limit, ask.hold)).all()
        # Lease half the keys found (their runs grow to fill the batch), leave the rest to the
        # next claim, this worker's or another's: a few keys move through several workers.
        heads = heads[: (len(heads) + 1) // 2]
        left_bytes = max_bytes
        if max_bytes is not None and heads:
            heads = heads[: fit_bytes((h.size for h in heads), max_bytes // 2)]
            left_bytes = max_bytes - sum(h.size for h in heads)
        followed = [] if heads else [RunEnd(key, seq) for key, seq in ask.following]
        keyed = len(heads) + len(followed)
        unordered_limit = (limit - keyed) // (2 if keyed else 1)
        rows: list[Row[Any]] = []
        if unordered_limit:
            rows = self.claim_unordered(
                conn, replace(ask, limit=unordered_limit, max_bytes=left_bytes)
            )
        if not keyed:
            return rows
        if left_bytes is not None:  # counted only when runs behind keys follow
            left_bytes -= rows_bytes(rows)
        ids, starts = [h.id for h in heads], list[Any]([*heads, *followed])
        share = (limit - len(rows) - len(ids)) // keyed
        places = [(h.ordering_key, h.seq + i) for h in starts for i in range(1, share + 1)]
        run_bytes = None if left_bytes is None else max(left_bytes, 0)
        if places and run_bytes != 0:
            found = conn.execute(self.run_statement(ask.hold), self.run_params(places)).all()
            run = cut_runs(starts, found, run_bytes)
            ids += run
            if left_bytes is not None:
                sizes = {r.id: r.size for r in found}
                left_bytes -= sum(sizes[i] for i in run)
        left = limit - len(rows) - len(ids)
        full = left_bytes is not None and left_bytes <= 0
        if left > 0 and len(rows) == unordered_limit and not full:
            # The runs were short and the unordered lane may have more: fill the batch.
            more = replace(ask, limit=left, max_bytes=left_bytes, first_anyway=False)
            rows += self.claim_unordered(conn, more)
        return rows + self.lease_ids(conn, ids, ask)

    def lease_values(self, worker: str, lease_seconds: float) -> dict[str, Any]:
        """The SET clause of a claim."""
        return {
            "status": PROCESSING,
            "locked_by": worker,
            "locked_until": self.now_plus(bindparam("lease_seconds", lease_seconds, Float)),
            "attempt": outbox.c.attempt + 1,
            "updated_at": self.now(),
        }

    def head_ids(self, limit: int, hold: Hold = NO_HOLD) -> Select[Any]:
        """Ids of up to ``limit`` claimable heads of their key, unlocked, in no order."""
        return self._due_heads(outbox.c.id, hold=hold).limit(limit)

    def backlog(
        self, limit: int, *, expired: bool = True, hold: Hold = NO_HOLD, floored: bool = False
    ) -> Select[Any]:
        """How many unordered rows and heads of keys are claimable now, counting each no
        further than ``limit`` (bounded scans); unordered expired leases only when
        ``expired`` (the wake-up's looks for new rows leave them out: see
        :meth:`unordered_ids`); what ``hold`` holds back is no work (a relay whose every
        due row is paused rests instead of claiming nothing in a loop)."""
        unordered = self.unordered_ids(
            limit, locked=False, expired=expired, hold=hold, floored=floored
        )
        heads = self.head_ids(limit, hold).subquery()
        return select(
            select(func.count()).select_from(unordered.subquery()).scalar_subquery()
            + select(func.count()).select_from(heads).scalar_subquery()
        )
