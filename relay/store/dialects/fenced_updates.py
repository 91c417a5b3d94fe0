"""The dispatch path's outcome statements: sent, rescheduled, buried, released, each fenced on
``(id, attempt)``, ``status = 'processing'`` and ``locked_by``; the lease's renewal and check;
the relay's side of per-key progress. Part of every dialect's builders
(:class:`relay.store.dialects.dispatch_path.Dialect`), which supply the clock and may override the
fence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Float,
    Select,
    Update,
    and_,
    bindparam,
    case,
    null,
    select,
    tuple_,
    update,
)

from relay.store.dialects.clock import FAILED, PENDING, PROCESSING, SENT, Clock, cached
from relay.store.schema.tables import outbox, outbox_progress


class OutcomeStatements(Clock):
    """What a relay records about a batch it holds, and its lease on it."""

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
