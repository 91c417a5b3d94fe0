"""Statements every database shares; each dialect supplies its clock and its claim.

The builders return SQLAlchemy Core statements and never execute them (except ``claim``, which
must run in the transaction the store opens, because some databases need several statements to
know which rows they claimed). A snapshot test compiles each one per dialect.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    ColumnElement,
    Connection,
    Delete,
    Float,
    RowMapping,
    Select,
    String,
    Update,
    and_,
    bindparam,
    delete,
    exists,
    func,
    literal_column,
    null,
    or_,
    select,
    tuple_,
    update,
)

from relay.records import Status
from relay.schema import outbox

#: The columns a claim returns: what the publisher needs and the fence.
CLAIM_COLUMNS = (
    outbox.c.id,
    outbox.c.event_type,
    outbox.c.payload,
    outbox.c.headers,
    outbox.c.ordering_key,
    outbox.c.attempt,
    outbox.c.created_at,
)

_ahead = outbox.alias("ahead")


def lit(status: Status) -> ColumnElement[str]:
    """A status as an inline SQL literal, never a bound parameter: the planner must see it to
    use the partial index (a generic prepared plan cannot match ``status = $1`` to it)."""
    return literal_column(f"'{status.value}'", String)


PENDING, PROCESSING, SENT, FAILED = (lit(s) for s in Status)


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
    def claimable(self) -> ColumnElement[bool]:
        """Rows a worker may claim now: due pending rows, expired leases, heads of their key."""
        due = or_(self.pending_due(), self.lease_expired())
        return and_(outbox.c.status.in_([PENDING, PROCESSING]), due, self.head_of_key())

    def pending_due(self) -> ColumnElement[bool]:
        """Pending rows whose ``next_retry_at`` has passed (or was never set)."""
        return and_(
            outbox.c.status == PENDING,
            or_(outbox.c.next_retry_at.is_(None), outbox.c.next_retry_at <= self.now()),
        )

    def lease_expired(self) -> ColumnElement[bool]:
        """Processing rows whose holder's lease has run out."""
        return and_(outbox.c.status == PROCESSING, outbox.c.locked_until < self.now())

    def head_of_key(self) -> ColumnElement[bool]:
        """Rows with no ordering key, or with no unsent row of their key ahead of them."""
        return or_(
            outbox.c.ordering_key.is_(None),
            ~exists(
                select(_ahead.c.id).where(
                    _ahead.c.ordering_key == outbox.c.ordering_key,
                    _ahead.c.id < outbox.c.id,
                    _ahead.c.status != SENT,
                )
            ),
        )

    def claim(
        self, conn: Connection, *, worker: str, limit: int, lease_seconds: float
    ) -> Sequence[RowMapping]:
        """Lease up to ``limit`` claimable rows to ``worker`` inside the open transaction."""
        raise NotImplementedError

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

    def mark_sent(self, worker: str) -> Update:
        """Confirmed rows become sent; bind ``keys`` = [(id, attempt), ...]."""
        now = self.now()
        return (
            update(outbox)
            .where(self._fence_many(worker))
            .values(status=SENT, sent_at=now, updated_at=now, locked_until=null())
        )

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

    def held(self, worker: str) -> Select[Any]:
        """Ids of the rows ``worker`` still holds among those bound as for :meth:`renew`."""
        return select(outbox.c.id).where(self._fence_many(worker))

    def renew(self, worker: str) -> Update:
        """Extend the lease of rows still held; bind ``keys`` and ``lease_seconds``."""
        return (
            update(outbox)
            .where(self._fence_many(worker))
            .values(locked_until=self.now_plus(bindparam("lease_seconds", type_=Float)))
        )

    # -- operations ------------------------------------------------------------------------
    def count_by_status(self) -> Select[Any]:
        """Rows per status."""
        return select(outbox.c.status, func.count()).group_by(outbox.c.status)

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

    def backlog(self, limit: int) -> Select[Any]:
        """How many rows are claimable now, counting no further than ``limit`` (bounded scan)."""
        claimable = select(outbox.c.id).where(self.claimable()).limit(limit).subquery()
        return select(func.count()).select_from(claimable)

    def try_lock(self, conn: Connection, key: int) -> bool:
        """Take the exclusive lock ``key`` until the open transaction ends, if it is free.

        The base has no such lock and says yes: its callers must be harmless when run twice.
        """
        return True

    def list_failed(self, limit: int) -> Select[Any]:
        """Dead-lettered rows, oldest first."""
        return (
            select(
                outbox.c.id,
                outbox.c.event_type,
                outbox.c.attempt,
                outbox.c.last_error,
                outbox.c.created_at,
                outbox.c.updated_at,
            )
            .where(outbox.c.status == FAILED)
            .order_by(outbox.c.id)
            .limit(limit)
        )

    def retry_failed(self, ids: Sequence[int] | None) -> Update:
        """Failed rows (all, or those in ``ids``) go back to pending with fresh attempts."""
        stmt = update(outbox).where(outbox.c.status == FAILED)
        if ids is not None:
            stmt = stmt.where(outbox.c.id.in_(ids))
        return stmt.values(
            status=PENDING,
            attempt=0,
            next_retry_at=null(),
            locked_by=null(),
            locked_until=null(),
            updated_at=self.now(),
        )

    def purge_failed(self, ids: Sequence[int] | None) -> Delete:
        """Delete failed rows (all, or those in ``ids``)."""
        stmt = delete(outbox).where(outbox.c.status == FAILED)
        if ids is not None:
            stmt = stmt.where(outbox.c.id.in_(ids))
        return stmt

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
