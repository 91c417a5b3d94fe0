"""The incident levers' statements: the pauses in force (``relay_pauses``) and the rate
limits' token buckets (``relay_rate_buckets``).

:class:`LeverStatements` borrows a dialect's clock, so a bucket is refilled by database time
(every relay of the fleet reads the same clock). The dispatch path reads pauses at most once a
second and locks a bucket row only in a claim of a limited type
(``relay.store.dispatch_path.levers``); the operator's verbs write pauses
(``relay.store.operations.pausing``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Delete,
    Float,
    Insert,
    Select,
    Update,
    and_,
    bindparam,
    delete,
    func,
    insert,
    literal,
    select,
    update,
)

from relay.store.dialects.clock import PENDING
from relay.store.dialects.dispatch_path import Dialect
from relay.store.dispatch_path.holds import NO_HOLD, Hold
from relay.store.schema.tables import outbox, pauses, rate_buckets


class LeverStatements:
    """SQL of the pauses and the rate limits' buckets over one database, on its clock."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    # -- pauses ------------------------------------------------------------------------------
    def in_force(self) -> Select[Any]:
        """``(kind, value)`` of every pause in force: what a relay holds back."""
        return select(pauses.c.kind, pauses.c.value)

    def listed(self) -> Select[Any]:
        """Every pause, oldest first, with its age in seconds on the database's clock."""
        age = self.dialect.seconds_since(pauses.c.paused_at).label("age_seconds")
        columns = (pauses.c.kind, pauses.c.value, pauses.c.reason, pauses.c.paused_by)
        return select(*columns, pauses.c.paused_at, age).order_by(pauses.c.id)

    def pause(self) -> Insert:
        """One pause; bind ``b_kind``, ``b_value``, ``b_reason``, ``b_by`` (a pause already in
        force violates the unique ``(kind, value)``: the store tells it apart first)."""
        return insert(pauses).values(
            kind=bindparam("b_kind"),
            value=bindparam("b_value"),
            reason=bindparam("b_reason"),
            paused_by=bindparam("b_by"),
        )

    def find(self) -> Select[Any]:
        """The pause bound as ``b_kind`` and ``b_value``, if in force."""
        return select(pauses.c.id).where(
            pauses.c.kind == bindparam("b_kind"), pauses.c.value == bindparam("b_value")
        )

    def resume(self) -> Delete:
        """Lift the pause bound as ``b_kind`` and ``b_value``."""
        return delete(pauses).where(
            pauses.c.kind == bindparam("b_kind"), pauses.c.value == bindparam("b_value")
        )

    def held_rows(self, hold: Hold, limit: int) -> Select[Any]:
        """How many pending rows ``hold`` holds back, counted no further than ``limit`` (a
        bounded scan, as the other gauges'); 0 for no hold."""
        if hold == NO_HOLD:
            return select(literal(0))
        unheld = and_(*self.dialect.holding(hold))
        held = select(outbox.c.id).where(outbox.c.status == PENDING, ~unheld).limit(limit)
        return select(func.count()).select_from(held.subquery())

    # -- rate limits -------------------------------------------------------------------------
    def bucket(self) -> Select[Any]:
        """The bucket named ``b_name``: its tokens and the seconds since it was last refilled,
        locked, or no row while another claim holds it (claims of its types take turns on this
        row, fleet-wide, and none waits for its turn)."""
        since = self.dialect.seconds_since(rate_buckets.c.refilled_at).label("elapsed")
        stmt = select(rate_buckets.c.tokens, since)
        stmt = stmt.where(rate_buckets.c.name == bindparam("b_name"))
        # SQLite: the claim's BEGIN IMMEDIATE already serializes.
        return stmt.with_for_update(skip_locked=True)

    def bucket_exists(self) -> Select[Any]:
        """Whether the bucket ``b_name`` exists (unlocked: a locked one is another claim's)."""
        return select(rate_buckets.c.name).where(rate_buckets.c.name == bindparam("b_name"))

    def new_bucket(self) -> Insert:
        """A bucket named ``b_name`` holding ``b_tokens``, refilled now."""
        values = {"name": bindparam("b_name"), "tokens": bindparam("b_tokens", type_=Float)}
        return insert(rate_buckets).values(values)

    def pay(self) -> Update:
        """Set the bucket ``b_name`` to ``b_tokens``, refilled now (database time)."""
        return (
            update(rate_buckets)
            .where(rate_buckets.c.name == bindparam("b_name"))
            .values(tokens=bindparam("b_tokens", type_=Float), refilled_at=self.dialect.now())
        )
