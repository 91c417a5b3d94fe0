"""The operations store: what commands, console, metrics and the fleet's purge ask of the outbox
(status, gauges, lists, retry, purge, audit, heartbeats, retention, the inbox purge). Nothing on
the dispatch path calls it; its statements are in ``relay.store.dialects.operations``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine

from relay.exceptions import SelectorError, StoreError
from relay.ordering import stalled_key
from relay.records import ClaimedEvent, Stall, StalledKey, Status, StatusReport
from relay.store import dialects
from relay.store.dialects.keys import KeyStatements
from relay.store.dialects.purge import SENT_PURGER, RetentionStatements
from relay.store.engine import json_loads_many
from relay.store.operations.actions import Actor, Changed
from relay.store.operations.filters import EventFilter
from relay.store.operations.readable import readable
from relay.store.schema.tables import outbox
from relay.store.transactions import BaseStore, executemany

#: Minutes of sent counts ``relay status`` adds up (the day the purger keeps).
COUNTS_KEPT_MINUTES = 24 * 60
#: ``relay status`` counts stalled keys up to this many, and names this many of them.
STALLED_COUNTED_UP_TO, STALLED_SAMPLE = 10_000, 5

log = logging.getLogger(__name__)

#: Advisory lock key of the sent-row purge (an arbitrary constant: "relay purge" in ASCII).
PURGE_LOCK_KEY = 0x72656C6179707267


class OperationsStore(BaseStore):
    """The operator's verbs over the ``outbox`` table of one database."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.ops = dialects.operations_for(self.dialect)
        self.counts = RetentionStatements(self.dialect)
        self.keys = KeyStatements(self.dialect)

    def status(self) -> StatusReport:
        """Rows per status, age of the oldest pending row, expired leases, stalled keys."""
        with self._tx() as conn:
            counts = {str(s): int(n) for s, n in conn.execute(self.ops.count_by_status())}
            sent = counts.pop("total", 0) - sum(counts.values())
            if sent > 0:
                counts[Status.SENT.value] = sent
            age = conn.execute(self.ops.oldest_pending_age()).scalar()
            expired = int(conn.execute(self.ops.expired_leases()).scalar() or 0)
            counted = {"b_minutes": COUNTS_KEPT_MINUTES}
            deleted = int(conn.execute(self.counts.sent_counted(), counted).scalar() or 0)
            stalled = self._count_stalled(conn, STALLED_COUNTED_UP_TO)
            sample = self._stalled(conn, STALLED_SAMPLE) if stalled else []
        age_s = None if age is None else max(0.0, float(age))
        return StatusReport(counts, age_s, expired, deleted, stalled, tuple(sample))

    def stalled_keys(self, limit: int) -> list[StalledKey]:
        """Up to ``limit`` ordering keys whose next row cannot be claimed, with why."""
        with self._tx() as conn:
            return self._stalled(conn, limit)

    def _count_stalled(self, conn: Connection, limit: int) -> int:
        return int(conn.execute(self.keys.count_stalled(limit)).scalar() or 0)

    def _stalled(self, conn: Connection, limit: int) -> list[StalledKey]:
        found = []
        for row in conn.execute(self.keys.stalled_keys(limit)).mappings():
            head = int(row["sent_seq"]) + 1
            if row["id"] is None:
                after = {"b_key": row["ordering_key"], "b_after": head}
                resumes = conn.execute(self.keys.first_after(), after).scalar()
                at = None if resumes is None else int(resumes)
                stalled = stalled_key(row["ordering_key"], Stall.MISSING, head, resumes_at=at)
            else:
                stall = Stall.FAILED if row["status"] == Status.FAILED else Stall.SENT
                stalled = stalled_key(
                    row["ordering_key"], stall, head, int(row["id"]), row["last_error"]
                )
            found.append(stalled)
        return sorted(found, key=lambda k: k.key)

    def gauges(self, limit: int) -> StatusReport:
        """What ``relay status`` reports for a metrics scrape: one statement of counts, each
        stopped at ``limit`` rows (bounded scans), and the stalled keys, counted up to
        ``limit``; ``sent`` is left out (the relay's counter gives its rate)."""
        with self._tx() as conn:
            row = conn.execute(self.ops.gauges(limit)).mappings().one()
            stalled = self._count_stalled(conn, limit)
        counts = {s: int(row[s] or 0) for s in ("pending", "processing", "failed")}
        age = row["oldest_pending_age"]
        expired = int(row["expired_leases"] or 0)
        age_s = None if age is None else max(0.0, float(age))
        return StatusReport(counts, age_s, expired, stalled_keys=stalled)

    def pause_gauges(self, limit: int) -> tuple[int, int, float]:
        """``relay.store.operations.pausing.PauseStore.gauges``: pauses, held rows, oldest age."""
        from relay.store.operations.pausing import PauseStore

        return PauseStore(self.engine).gauges(limit)

    def retention_gauges(self) -> tuple[int, float | None]:
        """Rows past the retention the last purge run left, and seconds since the oldest sent
        row still in the table was sent (None: no sent row): the purge's metrics."""
        with self._tx() as conn:
            row = conn.execute(self.counts.purger_record(), {"b_name": SENT_PURGER}).first()
            age = conn.execute(self.counts.oldest_sent_age()).scalar()
        behind = 0 if row is None else int(row.behind_rows)
        return behind, None if age is None else max(0.0, float(age))

    def beat(self, name: str) -> None:
        """Record that ``name`` (e.g. the tick) ran now, in database time."""
        with self._tx() as conn:
            if conn.execute(self.ops.beat_update(), {"b_name": name}).rowcount:
                return
        with contextlib.suppress(StoreError), self._tx() as conn:  # a racing first beat won
            conn.execute(self.ops.beat_insert(), {"b_name": name})

    def beat_ages(self) -> dict[str, float]:
        """Seconds since each heartbeat, by name (database time)."""
        with self._tx() as conn:
            return {n: max(0.0, float(a)) for n, a in conn.execute(self.ops.beat_ages())}

    def list_events(
        self, f: EventFilter, limit: int = 100, after: int | None = None
    ) -> list[dict[str, Any]]:
        """Rows the filter selects, by id after ``after``: a page of at most ``limit``."""
        with self._tx() as conn:
            stmt = self.ops.list_events(self.ops.matching(f), limit, after)
            return [_timed(r) for r in conn.execute(stmt).mappings()]

    def _count(self, conn: Connection, matching: Any) -> int:
        return int(conn.execute(self.ops.count_matching(matching)).scalar_one())

    def retry_failed(
        self,
        f: EventFilter | Sequence[int] | None = None,
        *,
        dry_run: bool = False,
        actor: Actor | None = None,
        expires_in: float | None = None,
        no_expiry: bool = False,
    ) -> Changed:
        """Put the failed rows the filter selects (all, or these ids) back to pending with
        fresh attempts; a dry run counts them and changes nothing. ``actor``: record the action
        in the audit table, in the same transaction. A selection holding rows past their
        deadline (:attr:`Changed.expired`, which would only expire again) is refused unless
        ``expires_in`` sets a new one (seconds from the database's now) or ``no_expiry``."""
        if (expires_in is not None and no_expiry) or not 0 < (expires_in or 1) < float("inf"):
            raise SelectorError("give a new deadline in the future or no expiry, not both")
        chosen = _failed(f).for_action("retry")
        matching = self.ops.matching(chosen)
        with self._tx() as conn:
            matched = self._count(conn, _and_failed(matching))
            late = sa.and_(matching, self.dialect.past_deadline())
            expired = self._count(conn, _and_failed(late)) if matched else 0
            if dry_run:
                return Changed(matched, 0, expired)
            if expired and expires_in is None and not no_expiry:
                raise SelectorError(
                    f"refusing to retry: {expired} of the {matched} failed events selected are "
                    "past their deadline (expires_at) and would be dead-lettered again at once: "
                    "give a new deadline (relay failed retry --expires-in DURATION) or clear it "
                    "(--no-expiry), or leave them out of the selection"
                )
            stmt = self.ops.retry_failed(matching, clear_expiry=no_expiry, new_expiry=expires_in)
            params = {} if expires_in is None else {"b_expires_seconds": expires_in}
            done = Changed(matched, conn.execute(stmt, params).rowcount, expired)
            given = {"expires_in": expires_in, "no_expiry": no_expiry or None}
            extra = {k: v for k, v in given.items() if v is not None}
            self._audit(conn, actor, "retry", chosen, done, extra)
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
        matching = self.ops.matching(chosen)
        with self._tx() as conn:
            matched = self._count(conn, _and_failed(matching))
            if dry_run:
                return Changed(matched, 0)
            places = conn.execute(self.ops.failed_places(matching)).all()
            n = conn.execute(self.ops.purge_failed(matching)).rowcount
            moves = [{"b_key": k, "b_from": int(s) - 1, "b_to": int(s)} for k, s in places]
            if moves:
                executemany(conn, self.ops.advance(), moves)
            self._audit(conn, actor, "purge", chosen, Changed(matched, n))
            return Changed(matched, n)

    def purge_sent_events(
        self, f: EventFilter, *, dry_run: bool = False, actor: Actor | None = None
    ) -> Changed:
        """Delete the sent rows the filter selects (ids, a filter or all), in one transaction;
        the retention purge (:meth:`purge_sent`) is the tool for deleting history by age."""
        chosen = replace(f, statuses=(Status.SENT,)).for_action("purge")
        matching = self.ops.matching(chosen)
        with self._tx() as conn:
            matched = self._count(conn, sa.and_(outbox.c.status == Status.SENT.value, matching))
            if dry_run:
                return Changed(matched, 0)
            done = Changed(matched, conn.execute(self.ops.purge_sent_matching(matching)).rowcount)
            self._audit(conn, actor, "purge", chosen, done)
            return done

    def sent_events(
        self, f: EventFilter, *, after: int, horizon: int, source: str
    ) -> list[ClaimedEvent]:
        """The sent rows ``f`` selects with ids in ``(after, horizon]``, by id, as the claim
        builds them (``source``: the outbox's CloudEvents source), so a replay's messages are
        the originals."""
        stmt = self.ops.sent_rows(self.ops.matching(f), after, horizon)
        with self._tx() as conn:
            rows = conn.execute(stmt).all()
        return ClaimedEvent.from_claims(rows, json_loads_many, source)

    def sent_extent(
        self, f: EventFilter, *, after: int | None = None
    ) -> tuple[int, tuple[int, int] | None]:
        """How many sent rows ``f`` selects (after id ``after``), and the lowest and highest
        such ids (None: none); the highest is a replay's horizon (rows sent after it started
        are not part of it)."""
        with self._tx() as conn:
            stmt = self.ops.sent_extent(self.ops.matching(f), after)
            n, first, last = conn.execute(stmt).one()
        return int(n), None if last is None else (int(first), int(last))

    def audit(
        self,
        actor: Actor,
        action: str,
        f: EventFilter,
        done: Changed,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Record an operator's action taken outside a row transaction (a replay), with
        ``extra`` beside the filter in its selector."""
        with self._tx() as conn:
            self._audit(conn, actor, action, f, done, extra)

    def _audit(
        self,
        conn: Connection,
        actor: Actor | None,
        action: str,
        f: EventFilter,
        done: Changed,
        extra: dict[str, Any] | None = None,
    ) -> None:
        if actor is None:
            return
        conn.execute(
            self.ops.record_action(),
            {
                "actor": actor.name[:255],
                "role": actor.role,
                "via": actor.via,
                "action": action,
                "status": f.statuses[0].value,
                "selector": {**f.as_dict(), **(extra or {})},
                "matched": done.matched,
                "changed": done.changed,
            },
        )

    def event(self, row_id: int) -> dict[str, Any] | None:
        """Every column of one row, or None when there is no such row; whatever the row holds,
        read without raising: payload and headers as ``relay.store.operations.readable`` shows
        them (with ``unreadable``: why and the stored text of each that cannot be shown as JSON)."""
        with self._tx() as conn:
            stmt = self.ops.event_details(self.ops.matching(EventFilter(ids=(row_id,))))
            row = conn.execute(stmt).mappings().first()
        return None if row is None else readable(_timed(row), json_loads_many)

    def sent_per_minute(self) -> list[dict[str, Any]]:
        """The last hour's sent events and commit-to-sent lag per minute ago, oldest first:
        sent rows, and the events deleted at send counted in ``outbox_sent_counts``."""
        with self._tx() as conn:
            rows = [*conn.execute(self.ops.sent_per_minute()).mappings()]
            rows += conn.execute(self.counts.sent_minutes()).mappings()
        minutes: dict[int, dict[str, Any]] = {}
        for r in rows:
            if r["minutes_ago"] is None or not 0 <= int(r["minutes_ago"]) < 60:
                continue
            n, mean = int(r["sent"]), max(0.0, float(r["mean_lag"] or 0))
            m = minutes.setdefault(int(r["minutes_ago"]), {"sent": 0, "lag": 0.0, "max": 0.0})
            m["sent"], m["lag"] = m["sent"] + n, m["lag"] + mean * n
            m["max"] = max(m["max"], float(r["max_lag"] or 0))
        return [
            {
                "minutes_ago": ago,
                "sent": m["sent"],
                "mean_lag": m["lag"] / m["sent"] if m["sent"] else 0.0,
                "max_lag": max(0.0, m["max"]),
            }
            for ago, m in sorted(minutes.items(), key=lambda item: -item[0])
        ]

    def leases(self) -> list[dict[str, Any]]:
        """Processing rows per lease holder: rows, expired ones, first and last expiry."""
        with self._tx() as conn:
            return [dict(r) for r in conn.execute(self.ops.leases_by_holder()).mappings()]

    def audit_log(self, limit: int = 100, after: int | None = None) -> list[dict[str, Any]]:
        """Operators' recorded actions, newest first, from just before audit id ``after``."""
        with self._tx() as conn:
            stmt = self.ops.audit_page(limit, after)
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
                if exclusive and not self.ops.try_lock(conn, PURGE_LOCK_KEY):
                    log.info("another purge is running; leaving the rest to it")
                    break
                n = conn.execute(self.ops.purge_sent(older_than_seconds, batch_size)).rowcount
            total += n
            batches += 1
            if n < batch_size:
                break
        return total

    def purge_inbox(self, older_than_seconds: float, batch_size: int) -> int:
        """Delete up to ``batch_size`` consumers' inbox rows received more than
        ``older_than_seconds`` ago, in one transaction; how many."""
        with self._tx() as conn:
            return self.dialect.purge_inbox(conn, float(older_than_seconds), batch_size)


def _failed(f: EventFilter | Sequence[int] | None) -> EventFilter:
    """A filter over failed rows: ids (the old calling style), all (None), or the filter."""
    if f is None:
        return EventFilter(statuses=(Status.FAILED,), all=True)
    if isinstance(f, EventFilter):
        return replace(f, statuses=(Status.FAILED,))
    return EventFilter(statuses=(Status.FAILED,), ids=tuple(f))


def _and_failed(matching: Any) -> Any:
    return sa.and_(outbox.c.status == Status.FAILED.value, matching)


def _timed(row: Mapping[Any, Any]) -> dict[str, Any]:
    """A listed row with a ``created_at`` that is no time (``relay.records.time_fault``: the
    row's ``last_error`` says what is stored) as None, which every view shows as no time."""
    out = dict(row)
    if "created_at" in out and not isinstance(out["created_at"], datetime):
        out["created_at"] = None
    return out
