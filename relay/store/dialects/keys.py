"""Stalled ordering keys: keys whose next row cannot be claimed (``relay doctor``, ``relay
status``, the console and the ``relay_stalled_keys`` gauge read them; docs/ordering.md).

The claim takes a key's head, the row numbered ``outbox_progress.sent_seq + 1``, and only while
it is pending or an expired lease. A key is stalled when rows wait behind a head that

- is ``failed``: held, by design, until an operator retries or purges it;
- does not exist while the key has a higher number: ``sent_seq + 1`` belongs to no committed
  row (a row numbered by hand, or deleted), and the key's rows wait for a number that never
  comes;
- is ``sent`` while the progress still points before it (progress edited by hand): the claim
  never looks past it.

Each key costs two index probes from ``outbox_progress`` into ``uq_outbox_ordering_key_seq``:
its head, and its highest number (read backwards, one entry), as the claim's own heads
statement costs one: the cost follows the number of keys, never the rows waiting behind a head
or a key's sent history. (A probe for "the first number above the progress" would read, on
MariaDB, every number of the key below it: the sent history still kept.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Select, and_, bindparam, func, or_, select

from relay.store.dialects.clock import FAILED, SENT
from relay.store.schema.tables import outbox, outbox_progress

if TYPE_CHECKING:
    from relay.store.dialects.dispatch_path import Dialect

#: What a stalled key's row reports: the key, its progress, its head (NULL when missing: then
#: ``last_seq``, the key's highest number, is above the head's).
STALL_COLUMNS = ("ordering_key", "sent_seq", "id", "status", "last_error", "last_seq")


class KeyHeads:
    """Part of every dialect's builders (:class:`relay.store.dialects.dispatch_path.Dialect`):
    how it reads each key's head and highest number, which PostgreSQL overrides."""

    def _key_heads(self, last: Select[Any]) -> Select[Any]:
        """Every key with its progress, its head (or NULLs), and ``last`` (its highest number,
        correlated to ``outbox_progress``) as ``last_seq``."""
        progress = outbox_progress.c
        joined = outbox.alias("h")
        place = and_(
            joined.c.ordering_key == progress.ordering_key,
            joined.c.seq == progress.sent_seq + 1,
        )
        return select(
            progress.ordering_key,
            progress.sent_seq,
            joined.c.id,
            joined.c.status,
            joined.c.last_error,
            last.correlate(outbox_progress).scalar_subquery().label("last_seq"),
        ).select_from(outbox_progress.outerjoin(joined, place))


class KeyStatements:
    """The stalled-key readings over one database."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def stalled_keys(self, limit: int) -> Select[Any]:
        """Up to ``limit`` stalled keys, in no order (:data:`STALL_COLUMNS`)."""
        keys = self._heads().subquery("k")
        k = keys.c
        missing = and_(k.id.is_(None), k.last_seq > k.sent_seq + 1)
        return select(*keys.c).where(or_(missing, k.status.in_([FAILED, SENT]))).limit(limit)

    def _heads(self) -> Select[Any]:
        """Every key with its progress, its head (or NULLs) and its highest number."""
        last = (
            select(outbox.c.seq)
            .where(
                outbox.c.ordering_key == outbox_progress.c.ordering_key,
                outbox.c.seq.is_not(None),
            )
            .order_by(outbox.c.seq.desc())
            .limit(1)
        )
        return self.dialect._key_heads(last)

    def count_stalled(self, limit: int) -> Select[Any]:
        """How many keys are stalled, counted up to ``limit``."""
        return select(func.count()).select_from(self.stalled_keys(limit).subquery())

    def first_after(self) -> Select[Any]:
        """The lowest number of key ``b_key`` above ``b_after`` (a missing head's key: where
        its rows resume)."""
        return (
            select(outbox.c.seq)
            .where(
                outbox.c.ordering_key == bindparam("b_key"),
                outbox.c.seq.is_not(None),
                outbox.c.seq > bindparam("b_after"),
            )
            .order_by(outbox.c.seq)
            .limit(1)
        )


__all__ = ["STALL_COLUMNS", "KeyHeads", "KeyStatements"]
