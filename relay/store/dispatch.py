"""The outbox database: owns every transaction, speaks in domain verbs, wraps DB errors.

The dispatcher and the CLI never see a SQL statement; the statements live in
``relay.store.dialects``.
"""

from __future__ import annotations

import contextlib
import logging
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine
from sqlalchemy import exc as sa_exc

from relay.exceptions import DatabaseUnavailable, StoreError
from relay.records import Buried, ClaimedEvent, Released, Rescheduled, Status, StatusReport
from relay.store import dialects
from relay.store.engine import create_engine, json_loads_many
from relay.store.eventids import default_source
from relay.store.filters import EventFilter
from relay.store.schema import heartbeats, outbox
from relay.urls import redact

log = logging.getLogger(__name__)

#: Advisory lock key of the sent-row purge (an arbitrary constant: "relay purge" in ASCII).
PURGE_LOCK_KEY = 0x72656C6179707267


@dataclass(frozen=True, slots=True)
class Completed:
    """How many rows each outcome statement changed; ``lost`` rows were fenced out."""

    sent: int
    rescheduled: int
    buried: int
    lost: int
    released: int = 0


class Store:
    """Domain verbs over the ``outbox`` table of one database."""

    def __init__(self, engine: Engine, *, source: str | None = None) -> None:
        self.engine = engine
        self.dialect = dialects.for_name(engine.dialect.name)
        #: The CloudEvents ``source`` of this outbox's messages (``RELAY_SOURCE``).
        self.source = source or default_source(engine.url)

    @classmethod
    def from_url(cls, url: str, *, source: str | None = None, **engine_kwargs: Any) -> Store:
        return cls(create_engine(url, **engine_kwargs), source=source)

    def dispose(self) -> None:
        self.engine.dispose()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Connection]:
        with _translate_errors(), self.engine.begin() as conn:
            yield conn

    # -- the dispatch cycle ----------------------------------------------------------------
    def claim(self, worker: str, limit: int, lease_seconds: float) -> list[ClaimedEvent]:
        """Lease up to ``limit`` claimable rows to ``worker``, oldest first, and commit."""
        with self._tx() as conn:
            return self._claim(conn, worker, limit, lease_seconds)

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
    ) -> tuple[Completed, list[ClaimedEvent]]:
        """Record a batch's outcomes and lease the next batch in the same short transaction:
        one commit per batch while draining instead of two, still none across broker I/O."""
        with self._tx() as conn:
            done = self._record(conn, worker, sent, rescheduled, buried, released)
            return done, self._claim(conn, worker, limit, lease_seconds)

    def _claim(
        self, conn: Connection, worker: str, limit: int, lease_seconds: float
    ) -> list[ClaimedEvent]:
        rows = self.dialect.claim(conn, worker=worker, limit=limit, lease_seconds=lease_seconds)
        return sorted(ClaimedEvent.from_claims(rows, json_loads_many, self.source), key=_by_id)

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
            stmt = self.dialect.mark_sent(worker)
            n_sent = conn.execute(stmt, self.dialect.fence_params(_keys(unordered))).rowcount
        if len(unordered) < len(sent):
            n_sent += self._mark_ordered(conn, worker, [e for e in sent if e.seq is not None])
        if rescheduled:
            n_resched = _executemany(
                conn,
                self.dialect.reschedule(),
                [
                    {
                        "b_id": r.event.id,
                        "b_attempt": r.event.attempt,
                        "b_worker": worker,
                        "b_delay": r.delay_seconds,
                        "b_error": r.error,
                    }
                    for r in rescheduled
                ],
            )
        if buried:
            n_buried = _executemany(
                conn,
                self.dialect.bury(),
                [
                    {
                        "b_id": b.event.id,
                        "b_attempt": b.event.attempt,
                        "b_worker": worker,
                        "b_error": b.error,
                    }
                    for b in buried
                ],
            )
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
        runs: dict[str, list[ClaimedEvent]] = {}
        for event in sorted(sent, key=lambda e: (str(e.ordering_key), e.seq or 0)):
            key = str(event.ordering_key)
            if key not in progress:  # numbered by hand without a progress row: start one
                conn.execute(self.dialect.start_progress(), {"key": key})
                progress[key] = 0
            run = runs.setdefault(key, [])
            if event.seq == int(progress[key]) + len(run) + 1:
                run.append(event)
        marked = [e for run in runs.values() for e in run]
        if not marked:
            return 0
        savepoint = conn.begin_nested()
        stmt = self.dialect.mark_sent(worker)
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

    def _release(self, conn: Connection, worker: str, group: Released) -> int:
        if not group.events:
            return 0
        params = {**self.dialect.fence_params(_keys(group.events)), "delay": group.delay_seconds}
        params["error"] = group.error
        return conn.execute(self.dialect.release(worker), params).rowcount

    def mark_sent(self, worker: str, events: Sequence[ClaimedEvent]) -> int:
        """Record confirmed rows as sent; returns how many this worker still held."""
        return self.complete(worker, sent=events).sent

    def reschedule(self, worker: str, items: Sequence[Rescheduled]) -> int:
        """Send failed rows back to pending after their backoff."""
        return self.complete(worker, rescheduled=items).rescheduled

    def bury(self, worker: str, items: Sequence[Buried]) -> int:
        """Dead-letter rows whose last attempt failed."""
        return self.complete(worker, buried=items).buried

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

    # -- operations ------------------------------------------------------------------------
    def status(self) -> StatusReport:
        """Rows per status, age of the oldest pending row, expired leases."""
        with self._tx() as conn:
            counts = {str(s): int(n) for s, n in conn.execute(self.dialect.count_by_status())}
            sent = counts.pop("total", 0) - sum(counts.values())
            if sent > 0:
                counts[Status.SENT.value] = sent
            age = conn.execute(self.dialect.oldest_pending_age()).scalar()
            expired = int(conn.execute(self.dialect.expired_leases()).scalar() or 0)
        return StatusReport(counts, None if age is None else max(0.0, float(age)), expired)

    def gauges(self, limit: int) -> StatusReport:
        """What ``relay status`` reports for a metrics scrape, in one statement, each count
        stopped at ``limit`` rows (bounded scans); ``sent`` is left out (the relay's counter
        gives its rate)."""
        with self._tx() as conn:
            row = conn.execute(self.dialect.gauges(limit)).mappings().one()
        counts = {s: int(row[s] or 0) for s in ("pending", "processing", "failed")}
        age = row["oldest_pending_age"]
        expired = int(row["expired_leases"] or 0)
        return StatusReport(counts, None if age is None else max(0.0, float(age)), expired)

    def backlog(self, limit: int) -> int:
        """Claimable rows right now, counted up to ``limit``: cost bounded whatever the history."""
        with self._tx() as conn:
            return int(conn.execute(self.dialect.backlog(limit)).scalar() or 0)

    def beat(self, name: str) -> None:
        """Record that ``name`` (e.g. the tick) ran now, in database time."""
        now = self.dialect.now()
        with self._tx() as conn:
            stmt = sa.update(heartbeats).where(heartbeats.c.name == name).values(beat_at=now)
            if conn.execute(stmt).rowcount:
                return
        with contextlib.suppress(StoreError), self._tx() as conn:  # a racing first beat won
            conn.execute(sa.insert(heartbeats).values(name=name, beat_at=now))

    def beat_ages(self) -> dict[str, float]:
        """Seconds since each heartbeat, by name (database time)."""
        age = self.dialect.seconds_since(heartbeats.c.beat_at)
        with self._tx() as conn:
            return {
                n: max(0.0, float(a)) for n, a in conn.execute(sa.select(heartbeats.c.name, age))
            }

    def list_events(
        self, f: EventFilter, limit: int = 100, after: int | None = None
    ) -> list[dict[str, Any]]:
        """Rows the filter selects, by id after ``after``: a page of at most ``limit``."""
        with self._tx() as conn:
            stmt = self.dialect.list_events(self.dialect.matching(f), limit, after)
            return [dict(r) for r in conn.execute(stmt).mappings()]

    def count_events(self, f: EventFilter) -> int:
        """How many rows the filter selects."""
        with self._tx() as conn:
            return self._count(conn, self.dialect.matching(f))

    def _count(self, conn: Connection, matching: Any) -> int:
        return int(conn.execute(self.dialect.count_matching(matching)).scalar_one())

    def list_failed(self, limit: int = 100) -> list[dict[str, Any]]:
        """Dead-lettered rows, oldest first."""
        return self.list_events(EventFilter(statuses=(Status.FAILED,)), limit)

    def retry_failed(
        self,
        f: EventFilter | Sequence[int] | None = None,
        *,
        dry_run: bool = False,
        actor: Actor | None = None,
    ) -> Changed:
        """Put the failed rows the filter selects (all, or these ids) back to pending with
        fresh attempts; a dry run counts them and changes nothing. ``actor``: record the action
        in the audit table, in the same transaction."""
        chosen = _failed(f).for_action("retry")
        matching = self.dialect.matching(chosen)
        with self._tx() as conn:
            matched = self._count(conn, _and_failed(matching))
            if dry_run:
                return Changed(matched, 0)
            done = Changed(matched, conn.execute(self.dialect.retry_failed(matching)).rowcount)
            self._audit(conn, actor, "retry", chosen, done)
            return done

    def purge_failed(
        self,
        f: EventFilter | Sequence[int] | None = None,
        *,
        dry_run: bool = False,
        actor: Actor | None = None,
    ) -> Changed:
        """Delete the failed rows the filter selects (all, or these ids); a purged failed head
        no longer holds its key, whose progress moves past it. A dry run changes nothing."""
        chosen = _failed(f).for_action("purge")
        matching = self.dialect.matching(chosen)
        with self._tx() as conn:
            matched = self._count(conn, _and_failed(matching))
            if dry_run:
                return Changed(matched, 0)
            places = conn.execute(self.dialect.failed_places(matching)).all()
            n = conn.execute(self.dialect.purge_failed(matching)).rowcount
            moves = [{"b_key": k, "b_from": int(s) - 1, "b_to": int(s)} for k, s in places]
            if moves:
                _executemany(conn, self.dialect.advance(), moves)
            self._audit(conn, actor, "purge", chosen, Changed(matched, n))
            return Changed(matched, n)

    def purge_sent_events(
        self, f: EventFilter, *, dry_run: bool = False, actor: Actor | None = None
    ) -> Changed:
        """Delete the sent rows the filter selects (ids, a filter or all), in one transaction;
        the retention purge (:meth:`purge_sent`) is the tool for deleting history by age."""
        chosen = replace(f, statuses=(Status.SENT,)).for_action("purge")
        matching = self.dialect.matching(chosen)
        with self._tx() as conn:
            matched = self._count(conn, sa.and_(outbox.c.status == Status.SENT.value, matching))
            if dry_run:
                return Changed(matched, 0)
            done = Changed(
                matched, conn.execute(self.dialect.purge_sent_matching(matching)).rowcount
            )
            self._audit(conn, actor, "purge", chosen, done)
            return done

    def _audit(
        self, conn: Connection, actor: Actor | None, action: str, f: EventFilter, done: Changed
    ) -> None:
        if actor is None:
            return
        conn.execute(
            self.dialect.record_action(),
            {
                "actor": actor.name[:255],
                "role": actor.role,
                "via": actor.via,
                "action": action,
                "status": f.statuses[0].value,
                "selector": f.as_dict(),
                "matched": done.matched,
                "changed": done.changed,
            },
        )

    def event(self, event_id: int) -> dict[str, Any] | None:
        """Every column of one row, or None when there is no such row."""
        with self._tx() as conn:
            stmt = self.dialect.event_details(self.dialect.matching(EventFilter(ids=(event_id,))))
            row = conn.execute(stmt).mappings().first()
        return None if row is None else dict(row)

    def sent_per_minute(self) -> list[dict[str, Any]]:
        """The last hour's sent rows and commit-to-sent lag per minute ago, oldest first."""
        with self._tx() as conn:
            rows = conn.execute(self.dialect.sent_per_minute()).mappings().all()
        return sorted(
            (
                {
                    "minutes_ago": int(r["minutes_ago"]),
                    "sent": int(r["sent"]),
                    "mean_lag": max(0.0, float(r["mean_lag"] or 0)),
                    "max_lag": max(0.0, float(r["max_lag"] or 0)),
                }
                for r in rows
                if r["minutes_ago"] is not None
            ),
            key=lambda r: -r["minutes_ago"],
        )

    def leases(self) -> list[dict[str, Any]]:
        """Processing rows per lease holder: rows, expired ones, first and last expiry."""
        with self._tx() as conn:
            return [dict(r) for r in conn.execute(self.dialect.leases_by_holder()).mappings()]

    def audit_log(self, limit: int = 100, after: int | None = None) -> list[dict[str, Any]]:
        """Operators' recorded actions, newest first, from just before audit id ``after``."""
        with self._tx() as conn:
            stmt = self.dialect.audit_page(limit, after)
            return [dict(r) for r in conn.execute(stmt).mappings()]

    def purge_sent(
        self,
        older_than_seconds: float,
        batch_size: int = 1000,
        max_batches: int | None = None,
        *,
        exclusive: bool = False,
    ) -> int:
        """Delete sent rows older than the retention in short transactions of ``batch_size``.

        ``exclusive``: each batch first takes the purge lock and the purge stops when another
        purger holds it, so a fleet deletes one batch at a time.
        """
        total = batches = 0
        while max_batches is None or batches < max_batches:
            with self._tx() as conn:
                if exclusive and not self.dialect.try_lock(conn, PURGE_LOCK_KEY):
                    log.info("another purge is running; leaving the rest to it")
                    break
                n = conn.execute(self.dialect.purge_sent(older_than_seconds, batch_size)).rowcount
            total += n
            batches += 1
            if n < batch_size:
                break
        return total


@dataclass(frozen=True, slots=True)
class Actor:
    """Who takes an operator's action, for the audit table."""

    #: The name given at sign-in, or a script's ``X-Relay-Actor``.
    name: str
    #: ``operator`` (only operators act; kept for the record).
    role: str
    #: ``console`` or ``api``.
    via: str


@dataclass(frozen=True, slots=True)
class Changed:
    """What an operator's action selected and what it changed (0 on a dry run)."""

    matched: int
    changed: int


def _failed(f: EventFilter | Sequence[int] | None) -> EventFilter:
    """A filter over failed rows: ids (the old calling style), all (None), or the filter."""
    if f is None:
        return EventFilter(statuses=(Status.FAILED,), all=True)
    if isinstance(f, EventFilter):
        return replace(f, statuses=(Status.FAILED,))
    return EventFilter(statuses=(Status.FAILED,), ids=tuple(f))


def _and_failed(matching: Any) -> Any:
    return sa.and_(outbox.c.status == Status.FAILED.value, matching)


_by_id = operator.attrgetter("id")


def _keys(events: Sequence[ClaimedEvent]) -> list[tuple[int, int]]:
    return [(e.id, e.attempt) for e in events]


def _executemany(conn: Connection, stmt: sa.Update, params: list[dict[str, Any]]) -> int:
    # executemany's rowcount is not summed by every driver; one execute per row is exact and
    # this path (failed publishes) is rare.
    if len(params) == 1:
        return conn.execute(stmt, params[0]).rowcount
    return sum(conn.execute(stmt, p).rowcount for p in params)


@contextlib.contextmanager
def _translate_errors() -> Iterator[None]:
    try:
        yield
    except (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DisconnectionError) as exc:
        raise DatabaseUnavailable(f"database unavailable: {_describe(exc)}") from exc
    except sa_exc.SQLAlchemyError as exc:
        raise StoreError(f"database error: {_describe(exc)}") from exc


def _describe(exc: sa_exc.SQLAlchemyError) -> str:
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip().splitlines()
    return redact(f"{type(orig or exc).__name__}: {text[0] if text else ''}")
