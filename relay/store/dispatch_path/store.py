"""The dispatch path's store: claim, record outcomes, renew and check leases.

Only the dispatcher, its lease keeper and the wake-ups (``backlog``) use it; the operator's
verbs are in :mod:`relay.store.operations.store`. The statements live in
``relay.store.dialects``; every outcome is fenced on (id, ``locked_by``, attempt).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Self

from sqlalchemy import Connection, Engine

from relay import ordering
from relay.config import Settings, timing
from relay.config.rate_limits import RateLimit
from relay.records import Buried, ClaimedEvent, Completed, Released, Rescheduled
from relay.store.dialects.purge import RetentionStatements
from relay.store.dispatch_path.claimsize import Ask, ClaimFit, rows_bytes
from relay.store.dispatch_path.levers import Levers
from relay.store.engine import create_engine, json_loads_many
from relay.store.schema.eventids import default_source
from relay.store.transactions import BaseStore, executemany

__all__ = ["Completed", "DispatchStore"]

#: Rows of ``outbox_sent_counts`` per minute: relays hash their worker id onto one of them, so
#: their outcome transactions seldom wait on each other's count row.
COUNT_SHARDS = 16


class DispatchStore(BaseStore):
    """The dispatch path's verbs over the ``outbox`` table of one database."""

    def __init__(
        self,
        engine: Engine,
        *,
        source: str | None = None,
        delete_on_send: bool = False,
        batch_max_bytes: int | None = None,
        rate_limits: tuple[RateLimit, ...] = (),
    ) -> None:
        super().__init__(engine)
        #: ``RELAY_BATCH_MAX_BYTES``: most bytes of payload and headers one claim leases
        #: (``relay.store.dialects.dispatch_path.Dialect.claim``); None: bounded by rows only.
        self.batch_max_bytes = batch_max_bytes
        self._fit = ClaimFit()
        #: The CloudEvents ``source`` of this outbox's messages (``RELAY_SOURCE``).
        self.source = source or default_source(engine.url)
        #: ``RELAY_DELETE_ON_SEND``: the fenced statement that records a row as sent deletes
        #: it, and counts it per minute in ``outbox_sent_counts`` in the same transaction.
        self.delete_on_send = delete_on_send
        self.retention = RetentionStatements(self.dialect)
        #: The pauses in force and ``RELAY_RATE_LIMITS``: what every claim and backlog holds back.
        self.levers = Levers(self.dialect, rate_limits)

    @classmethod
    def from_settings(cls, settings: Settings, **engine_kwargs: Any) -> Self:
        """The store every relay process dispatches through: ``RELAY_DATABASE_URL``, with
        ``RELAY_SOURCE`` as its messages' source, deleting at send with ``RELAY_DELETE_ON_SEND``,
        every call bounded by deadlines derived from the lease (:func:`dispatch_engine_kwargs`),
        its claims bounded by ``RELAY_BATCH_MAX_BYTES``."""
        engine_kwargs = {**dispatch_engine_kwargs(settings), **engine_kwargs}
        return cls(
            create_engine(settings.database_url, **engine_kwargs),
            source=settings.source,
            delete_on_send=settings.delete_on_send,
            batch_max_bytes=settings.batch_max_bytes,
            rate_limits=settings.rate_limit_rules,
        )

    # -- the dispatch cycle ----------------------------------------------------------------
    def claim(
        self,
        worker: str,
        limit: int,
        lease_seconds: float,
        *,
        expired: bool = True,
        following: Sequence[tuple[str, int]] = (),
    ) -> list[ClaimedEvent]:
        """Lease up to ``limit`` claimable rows to ``worker``, oldest first, and commit; the
        unordered rows whose lease expired only when ``expired``
        (``relay.store.dispatch_path.lease_sweep.LeaseSweep``); no more than
        ``batch_max_bytes`` of payload and headers, but always at least one row. ``following``:
        (key, last number) of the runs ``worker`` has in flight, whose next runs it may lease
        (:class:`~relay.store.dispatch_path.claimsize.Ask`)."""
        with self._tx() as conn:
            return self._claim(conn, worker, limit, lease_seconds, expired, following)

    def complete(
        self,
        worker: str,
        *,
        sent: Sequence[ClaimedEvent] = (),
        rescheduled: Sequence[Rescheduled] = (),
        buried: Sequence[Buried] = (),
        released: Sequence[Released] = (),
    ) -> Completed:
        """Record a batch's outcomes in one transaction, one fenced statement per kind."""
        with self._tx() as conn:
            return self._record(conn, worker, sent, rescheduled, buried, released)

    def complete_and_claim(
        self,
        worker: str,
        *,
        sent: Sequence[ClaimedEvent] = (),
        rescheduled: Sequence[Rescheduled] = (),
        buried: Sequence[Buried] = (),
        released: Sequence[Released] = (),
        limit: int,
        lease_seconds: float,
        expired: bool = True,
        following: Sequence[tuple[str, int]] = (),
    ) -> tuple[Completed, list[ClaimedEvent]]:
        """Record a batch's outcomes and lease the next batch in the same short transaction:
        one commit per batch while draining instead of two, still none across broker I/O."""
        with self._tx() as conn:
            done = self._record(conn, worker, sent, rescheduled, buried, released)
            return done, self._claim(conn, worker, limit, lease_seconds, expired, following)

    def _claim(
        self,
        conn: Connection,
        worker: str,
        limit: int,
        lease_seconds: float,
        expired: bool,
        following: Sequence[tuple[str, int]] = (),
    ) -> list[ClaimedEvent]:
        max_bytes = self.batch_max_bytes
        asked = limit if max_bytes is None else self._fit.ask(limit)
        ask = Ask(worker, asked, lease_seconds, expired=expired, max_bytes=max_bytes)
        ask = replace(ask, following=tuple(following), size_late=self._fit.size_late)
        rows = self.levers.claim(conn, ask)
        if max_bytes is not None:
            self._fit.claimed(asked, len(rows), rows_bytes(rows), max_bytes)
        return ordering.publish_order(ClaimedEvent.from_claims(rows, json_loads_many, self.source))

    def _record(
        self,
        conn: Connection,
        worker: str,
        sent: Sequence[ClaimedEvent],
        rescheduled: Sequence[Rescheduled],
        buried: Sequence[Buried],
        released: Sequence[Released] = (),
    ) -> Completed:
        n_sent = n_resched = n_buried = n_released = 0
        unordered = [e for e in sent if e.seq is None]
        if unordered:
            stmt = self._sent_statement(worker)
            n_sent = conn.execute(stmt, self.dialect.fence_params(_keys(unordered))).rowcount
            self._count_sent(conn, worker, unordered, n_sent)
        if len(unordered) < len(sent):
            ordered = [e for e in sent if e.seq is not None]
            n_ordered = self._mark_ordered(conn, worker, ordered)
            self._count_sent(conn, worker, ordered, n_ordered)
            n_sent += n_ordered
        if rescheduled:
            again = [
                (r.event, {"b_delay": r.delay_seconds, "b_error": r.error}) for r in rescheduled
            ]
            n_resched = executemany(conn, self.dialect.reschedule(), _fenced(worker, again))
        if buried:
            failed = [(b.event, {"b_error": b.error}) for b in buried]
            n_buried = executemany(conn, self.dialect.bury(), _fenced(worker, failed))
        for group in released:
            n_released += self._release(conn, worker, group)
        expected = len(sent) + len(rescheduled) + len(buried) + sum(len(r.events) for r in released)
        lost = expected - n_sent - n_resched - n_buried - n_released
        return Completed(n_sent, n_resched, n_buried, lost, n_released)

    def _mark_ordered(self, conn: Connection, worker: str, sent: Sequence[ClaimedEvent]) -> int:
        """Mark ordered rows sent and move their keys' progress, under the progress rows' locks
        (taken in key order). Only a run that continues its key's progress without a gap is
        marked, so a key's sent rows are always exactly those up to its progress; a row whose
        lease was lost ends its key's run there. Returns how many rows were marked."""
        keys = sorted({str(e.ordering_key) for e in sent})
        progress = dict(conn.execute(self.dialect.progress_statement(), {"keys": keys}).all())
        for key in keys:
            if key not in progress:  # numbered by hand without a progress row: start one
                conn.execute(self.dialect.start_progress(), {"key": key})
                progress[key] = 0
        runs = ordering.sendable_runs(sent, progress)
        marked = [e for run in runs.values() for e in run]
        if not marked:
            return 0
        savepoint = conn.begin_nested()
        stmt = self._sent_statement(worker)
        if conn.execute(stmt, self.dialect.fence_params(_keys(marked))).rowcount == len(marked):
            savepoint.commit()
        else:
            # A lease was lost under part of a run: mark row by row, each key up to its first
            # row this worker no longer holds.
            savepoint.rollback()
            for key, run in runs.items():
                kept = 0
                for event in run:
                    params = self.dialect.fence_params([(event.id, event.attempt)])
                    if conn.execute(stmt, params).rowcount != 1:
                        break
                    kept += 1
                runs[key] = run[:kept]
        moves = {key: int(progress[key]) + len(run) for key, run in runs.items() if run}
        if moves:
            conn.execute(self.dialect.set_progress(moves))
        return sum(len(run) for run in runs.values())

    def _sent_statement(self, worker: str) -> Any:
        """The fenced statement that records confirmed rows: UPDATE to sent, or DELETE."""
        if self.delete_on_send:
            return self.retention.delete_sent(worker)
        return self.dialect.mark_sent(worker)

    def _count_sent(
        self, conn: Connection, worker: str, events: Sequence[ClaimedEvent], n: int
    ) -> None:
        """With delete on send, add ``n`` of ``events`` (those recorded) to this minute's
        count, with their commit-to-sent lag; the shard spreads concurrent relays' updates."""
        if not (self.delete_on_send and n and events):
            return
        created = [e.created_at.timestamp() for e in events]
        params = {
            "b_shard": zlib.crc32(worker.encode()) % COUNT_SHARDS,
            "b_sent": n,
            # A lease lost under part of the batch leaves n below len(events): scaled.
            "b_created_sum": sum(created) * n / len(created),
            "b_created_min": min(created),
        }
        conn.execute(self.retention.count_sent(), params)

    def _release(self, conn: Connection, worker: str, group: Released) -> int:
        if not group.events:
            return 0
        params = {**self.dialect.fence_params(_keys(group.events)), "delay": group.delay_seconds}
        params["error"] = group.error
        return conn.execute(self.dialect.release(worker), params).rowcount

    def release(
        self, worker: str, events: Sequence[ClaimedEvent], delay_seconds: float, error: str
    ) -> int:
        """Give rows back without spending their attempt, claimable after ``delay_seconds``."""
        with self._tx() as conn:
            return self._release(conn, worker, Released(list(events), delay_seconds, error))

    def renew(self, worker: str, events: Sequence[ClaimedEvent], lease_seconds: float) -> int:
        """Extend the lease on rows ``worker`` still holds; returns how many it still holds."""
        if not events:
            return 0
        with self._tx() as conn:
            params = {**self.dialect.fence_params(_keys(events)), "lease_seconds": lease_seconds}
            return conn.execute(self.dialect.renew(worker), params).rowcount

    def still_held(self, worker: str, events: Sequence[ClaimedEvent]) -> list[ClaimedEvent]:
        """The rows of ``events`` that ``worker`` still holds (same attempt, still processing)."""
        if not events:
            return []
        with self._tx() as conn:
            params = self.dialect.fence_params(_keys(events))
            ids = set(conn.execute(self.dialect.held(worker), params).scalars())
        return [e for e in events if e.id in ids]

    def backlog(self, limit: int, *, expired: bool = True) -> int:
        """Claimable rows right now, counted up to ``limit``: cost bounded whatever the history.
        Without ``expired``, unordered expired leases are left out: a look for new rows, whose
        cost does not grow with the rows relayed since the table's last vacuum. Rows held back
        by a pause (or by a rate limit this relay found spent) are no work: a relay whose every
        due row is paused rests instead of claiming nothing in a loop."""
        with self._tx() as conn:
            hold = self.levers.backlog_hold(conn)
            if hold is None:
                return 0
            floor = self.levers.backlog_floor(hold)
            stmt = self.dialect.backlog(
                limit, expired=expired, hold=hold, floored=floor is not None
            )
            return int(conn.execute(stmt, self.dialect.floor_params(floor)).scalar() or 0)


def dispatch_engine_kwargs(settings: Settings) -> dict[str, Any]:
    """Engine options of the dispatch path and its wake-ups: deadlines from the lease, and a
    watchdog abandoning any call past a third of it (:mod:`relay.store.watchdog`), so that a
    server that stops answering is noticed before the leases it holds run out."""
    return {"deadlines": timing.database_deadlines(settings.lease_seconds), "abandon_calls": True}


def _fenced(
    worker: str, outcomes: Sequence[tuple[ClaimedEvent, dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Each row's outcome parameters with those that fence it (one statement per row)."""
    return [
        {"b_id": e.id, "b_attempt": e.attempt, "b_worker": worker, **params}
        for e, params in outcomes
    ]


def _keys(events: Sequence[ClaimedEvent]) -> list[tuple[int, int]]:
    return [(e.id, e.attempt) for e in events]
