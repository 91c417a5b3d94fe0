"""The retention store: the purger's lease, its paced deletes and record, and the readings the
doctor, the metrics and the console take of retention (rows past it, the oldest sent row, the
sent counts kept when rows are deleted at send).

Statements are in ``relay.store.dialects.purge`` (and the batch delete in the operations
dialect, shared with ``relay purge-sent``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc

from relay.store import dialects
from relay.store.dialects.purge import SENT_PURGER, RetentionStatements
from relay.store.operations.store import COUNTS_KEPT_MINUTES
from relay.store.transactions import BaseStore

#: Rows past the retention a purge run counts when it stops with rows left, and the most the
#: record, ``relay doctor`` and ``relay_outbox_purge_behind_rows`` show: a bounded read of
#: ``ix_outbox_sent_at`` from its start (the rows the purge deletes next), under a second. A
#: count of millions cost more than the purge it reports on: on MariaDB, whose planner reads
#: the whole table and sorts it for so large a LIMIT, a count of a 10,000,000-row backlog ran
#: for over a minute after every 10-second run, read the table from disk and held a read view
#: that kept InnoDB from removing the deleted rows' index entries the claims then stepped over.
BEHIND_COUNTED_UP_TO = 100_000


def _seconds(value: Any) -> float | None:
    """A database's reading of seconds (NULL: None), never below 0 (clocks read apart)."""
    return None if value is None else max(0.0, float(value))


@dataclass(frozen=True, slots=True)
class PurgerRecord:
    """What the last two purge runs left behind, and when the last one ended."""

    #: Sent rows past the retention left after the last run (0: it caught up).
    behind_rows: int
    #: The same after the run before it.
    prev_behind_rows: int
    #: Seconds since the last run ended; None if no run has ended yet.
    ran_ago_seconds: float | None
    #: The purger holding the lease now, if any.
    holder: str | None

    @property
    def falling_behind(self) -> bool:
        """Rows past the retention grew from one run to the next: the purge does not keep up."""
        return self.behind_rows > 0 and self.behind_rows > self.prev_behind_rows

    @property
    def far_behind(self) -> bool:
        """The last run left at least :data:`BEHIND_COUNTED_UP_TO` rows past the retention
        (counts stop there, so two such runs cannot show growth): a backlog is being purged,
        or the purge does not keep up."""
        return self.behind_rows >= BEHIND_COUNTED_UP_TO


@dataclass(frozen=True, slots=True)
class PurgeBatch:
    """One purge transaction: the rows it deleted and how late delivery was."""

    deleted: int
    #: Seconds since the oldest due pending row was written (None: none due); see
    #: ``RetentionStatements.delivery_lag``.
    lag: float | None


class RetentionStore(BaseStore):
    """Retention's verbs over the ``outbox`` table of one database."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.ops = dialects.operations_for(self.dialect)
        self.sql = RetentionStatements(self.dialect)

    def take_lease(self, holder: str, seconds: float, name: str = SENT_PURGER) -> bool:
        """Hold purger ``name``'s lease for ``seconds`` (or renew it); False: another has it."""
        with self._tx() as conn:
            return self._take(conn, holder, seconds, name)

    def _take(self, conn: Any, holder: str, seconds: float, name: str) -> bool:
        params = {"b_name": name, "b_holder": holder, "b_seconds": seconds}
        if conn.execute(self.sql.take_lease(), params).rowcount:
            return True
        if conn.execute(self.sql.purger_record(), {"b_name": name}).first() is not None:
            return False
        with contextlib.suppress(sa_exc.IntegrityError), conn.begin_nested():
            conn.execute(self.sql.add_purger(), {"b_name": name})
        return bool(conn.execute(self.sql.take_lease(), params).rowcount)

    def purge_batch(
        self, holder: str, lease_seconds: float, older_than_seconds: float, limit: int
    ) -> PurgeBatch | None:
        """Renew the lease, delete up to ``limit`` sent rows past the retention and read how
        late delivery is, in one short transaction; None (nothing deleted) when the lease was
        lost to another purger."""
        with self._tx() as conn:
            if not self._take(conn, holder, lease_seconds, SENT_PURGER):
                return None
            deleted = int(conn.execute(self.ops.purge_sent(older_than_seconds, limit)).rowcount)
            lag = conn.execute(self.sql.delivery_lag()).scalar()
        return PurgeBatch(deleted, _seconds(lag))

    def delivery_lag(self) -> float | None:
        """Seconds since the oldest due pending row was written (None: none due)."""
        with self._tx() as conn:
            lag = conn.execute(self.sql.delivery_lag()).scalar()
        return _seconds(lag)

    def end_run(self, holder: str, behind_rows: int, name: str = SENT_PURGER) -> None:
        """Give the lease back, recording the rows left past the retention; old counts go."""
        with self._tx() as conn:
            params = {"b_name": name, "b_holder": holder, "b_behind": behind_rows}
            conn.execute(self.sql.end_run(), params)
            conn.execute(self.sql.forget_counts(), {"b_minutes": COUNTS_KEPT_MINUTES})

    def record(self, name: str = SENT_PURGER) -> PurgerRecord | None:
        """The purger's record; None where the table has no such row (not migrated)."""
        with self._tx() as conn:
            row = conn.execute(self.sql.purger_record(), {"b_name": name}).first()
        if row is None:
            return None
        ago = _seconds(row.ran_ago)
        return PurgerRecord(int(row.behind_rows), int(row.prev_behind_rows), ago, row.holder)

    def past_retention(self, older_than_seconds: float, limit: int) -> int:
        """Sent rows older than the retention, counted up to ``limit``."""
        with self._tx() as conn:
            stmt = self.sql.past_retention(older_than_seconds, limit)
            return int(conn.execute(stmt).scalar() or 0)

    def oldest_sent_age(self) -> float | None:
        """Seconds since the oldest sent row still in the table was sent (None: no sent row)."""
        with self._tx() as conn:
            age = conn.execute(self.sql.oldest_sent_age()).scalar()
        return _seconds(age)

    def sent_counted(self, minutes: int = 60) -> int:
        """Events counted sent (deleted at send) in the last ``minutes`` minutes."""
        with self._tx() as conn:
            return int(conn.execute(self.sql.sent_counted(), {"b_minutes": minutes}).scalar() or 0)

    def sent_minutes(self) -> list[dict[str, Any]]:
        """The last hour's counted sends per minute ago, with mean and largest lag."""
        with self._tx() as conn:
            return [dict(r) for r in conn.execute(self.sql.sent_minutes()).mappings()]


__all__ = ["COUNTS_KEPT_MINUTES", "PurgerRecord", "RetentionStore"]
