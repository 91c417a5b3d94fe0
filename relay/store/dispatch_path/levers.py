"""The incident levers on the dispatch path: the pauses in force, read from ``relay_pauses``
at most once a second, and the rate limits' token buckets, taken in the claim's transaction.

Every runner claims through :class:`relay.store.dispatch_path.store.DispatchStore`, so every
runner honours both here, once. A claim runs in two parts:

- first, per limit, within half of the batch and unless its bucket is known empty: lock its
  bucket row (claims of that type take turns fleet-wide; a claim that finds it locked skips
  the type this time instead of waiting), refill it by the database clock, claim at most as
  many rows of the type as it holds whole tokens (keys in order, as any claim) and pay for what
  was taken;
- then the main claim, the rest of the batch: it holds back paused rows and every
  rate-limited type, so it never waits on a bucket.

A relay that emptied a bucket leaves its type alone until tokens are back
(``relay.config.rate_limits.rest_seconds``), so it neither spins nor locks the row in vain; its
backlog counts the type as no work meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, Row
from sqlalchemy.exc import IntegrityError

from relay.config.rate_limits import RateLimit, refilled, rest_seconds, takeable
from relay.store.dialects.dispatch_path import Dialect
from relay.store.dialects.levers import LeverStatements
from relay.store.dispatch_path.claimsize import Ask, rows_bytes
from relay.store.dispatch_path.floors import Floors
from relay.store.dispatch_path.holds import Hold, Pauses

#: While claims find rows of limited types only, the main claim (which reads past them) runs
#: at most this often: a row of another type then waits up to this long more.
MAIN_RECHECK_SECONDS = 0.1
#: A relay reads the pauses in force at most this often: a pause or a resume holds on every
#: relay of the fleet within twice this (a read just missed, then the claim after the next).
PAUSES_READ_SECONDS = 1.0


class Levers:
    """One database's pauses (cached) and rate limits, for one dispatch store."""

    def __init__(
        self,
        dialect: Dialect,
        limits: tuple[RateLimit, ...] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dialect, self.limits, self.clock = dialect, limits, clock
        self.statements = LeverStatements(dialect)
        self._pauses = Pauses()
        self._read_at: float | None = None
        #: Per limit, until when (``clock``) this relay leaves its type alone: its bucket was
        #: found empty.
        self._resting: dict[str, float] = {}
        #: When the main claim last found nothing (None: it found rows), while limited lanes
        #: claimed: it is skipped for :data:`MAIN_RECHECK_SECONDS` after.
        self._main_empty_at: float | None = None
        #: Where each held claim starts reading the pending rows, past what it holds back.
        self.floors = Floors()

    def pauses(self, conn: Connection) -> Pauses:
        """The pauses in force, read again when the last read is a second old."""
        now = self.clock()
        if self._read_at is None or now - self._read_at >= PAUSES_READ_SECONDS:
            rows = conn.execute(self.statements.in_force()).all()
            self._pauses, self._read_at = Pauses.from_rows((r.kind, r.value) for r in rows), now
        return self._pauses

    def backlog_hold(self, conn: Connection) -> Hold | None:
        """What a look for work leaves out: paused rows and the types whose bucket this relay
        found empty; None when the database is paused (no work at all)."""
        pauses = self.pauses(conn)
        if pauses.database:
            return None
        now = self.clock()
        resting = [limit.pattern for limit in self.limits if self._resting.get(limit.name, 0) > now]
        return pauses.hold().also(resting)

    def backlog_floor(self, hold: Hold) -> int | None:
        """Where a look for work under ``hold`` starts, as the claims under it learned."""
        return self.floors.floor(hold, self.clock())

    def claim(self, conn: Connection, ask: Ask) -> list[Row[Any]]:
        """Lease up to ``ask.limit`` rows as the module says: nothing paused, limited types
        within their buckets."""
        pauses = self.pauses(conn)
        if pauses.database:
            return []
        held = pauses.hold()
        if not self.limits:
            return self._held_claim(conn, replace(ask, hold=held))
        # The limited lanes first, together at most half of the batch (a backlog of other types
        # cannot starve a limited one, nor a fast limit the others), then the main claim; the
        # whole batch while the main claim lately found nothing (it is skipped then, below).
        now = self.clock()
        last = self._main_empty_at
        quiet = last is not None and now - last < MAIN_RECHECK_SECONDS
        share = ask.limit if quiet else (ask.limit + 1) // 2
        rows: list[Row[Any]] = []
        earlier: list[str] = []
        for limit in self.limits:
            left = share - len(rows)
            if left <= 0:
                break
            if self._resting.get(limit.name, 0) <= self.clock():
                hold = Hold(held.types + tuple(earlier), held.keys, only=limit.pattern)
                limited = replace(ask, limit=left, hold=hold, following=())
                rows += self._take(conn, limited, limit)
            earlier.append(limit.pattern)
        left_bytes = None if ask.max_bytes is None else ask.max_bytes - _bytes(rows)
        if ask.limit - len(rows) <= 0 or (left_bytes is not None and left_bytes <= 0):
            return rows
        if rows and quiet:
            # Only limited rows moved lately: the main claim would read past all of them again
            # for nothing (its cost grows with their backlog). Others wait this long more.
            return rows
        unlimited = held.also(limit.pattern for limit in self.limits)
        main = replace(ask, limit=ask.limit - len(rows), max_bytes=left_bytes, hold=unlimited)
        if rows:
            main = replace(main, first_anyway=False)
        others = self._held_claim(conn, main)
        self._main_empty_at = None if others else now
        return rows + others

    def _take(self, conn: Connection, ask: Ask, limit: RateLimit) -> list[Row[Any]]:
        """Claim the rows of one limit's types that its bucket pays for (bucket row locked);
        none when another relay holds the bucket now (its turn: this one does not wait)."""
        bucket = self._bucket(conn, limit)
        if bucket is None:
            return []
        tokens = refilled(*bucket, limit)
        wanted = takeable(tokens, ask.limit)
        rows = self._held_claim(conn, replace(ask, limit=wanted)) if wanted else []
        if rows:
            tokens -= len(rows)
            conn.execute(self.statements.pay(), {"b_name": limit.name, "b_tokens": tokens})
        rest = rest_seconds(tokens, limit) if len(rows) == wanted else 0.0
        self._resting[limit.name] = self.clock() + rest
        return rows

    def _held_claim(self, conn: Connection, ask: Ask) -> list[Row[Any]]:
        """The dialect's claim of ``ask``, its pending rows read from the floor its hold
        learned (``relay.store.dispatch_path.floors``); a claim that holds nothing back reads
        as it always did."""
        if not ask.hold:
            return self.dialect.claim(conn, ask)
        now = self.clock()
        floor = self.floors.floor(ask.hold, now)
        rows = self.dialect.claim(conn, replace(ask, floor=floor))
        if rows or ask.first_anyway or ask.max_bytes is None:
            # (No row under a byte bound without first_anyway says nothing: all may be cut.)

            def top() -> int | None:
                return conn.execute(self.statements.top_id()).scalar()

            taken = ((row.id, row.seq is not None) for row in rows)
            self.floors.learned(ask.hold, floor, taken, top, now)
        return rows

    def _bucket(self, conn: Connection, limit: RateLimit) -> tuple[float, float] | None:
        """The bucket's tokens and seconds since its refill, locked (skipping it when another
        claim holds it: None); made full when missing."""
        params = {"b_name": limit.name}
        found = conn.execute(self.statements.bucket(), params).first()
        if found is not None:
            return float(found.tokens), float(found.elapsed or 0.0)
        if conn.execute(self.statements.bucket_exists(), params).first() is not None:
            return None  # locked by another relay's claim
        try:
            with conn.begin_nested():
                conn.execute(self.statements.new_bucket(), {**params, "b_tokens": limit.burst})
        except IntegrityError:
            return None  # another relay made it meanwhile
        return limit.burst, 0.0


def _bytes(rows: list[Row[Any]]) -> int:
    return rows_bytes(rows)


__all__ = ["MAIN_RECHECK_SECONDS", "PAUSES_READ_SECONDS", "Levers"]
