"""The wake-up flag (the sequence ``relay_wakeup``, migration 0011): whether the outbox
trigger NOTIFYs.

Only listeners set it; the trigger's ``WHEN`` reads it without a lock or a query. Setting a
sequence is not transactional: it takes effect at once. PostgreSQL only: other databases have
no trigger and their relays poll.
"""

from __future__ import annotations

from relay.store.dialects.postgresql import PostgresDialect
from relay.store.dispatch import Store


class WakeupFlag:
    """Turns the writers' NOTIFY on and off in ``store``'s database (PostgreSQL)."""

    def __init__(self, store: Store) -> None:
        if not isinstance(store.dialect, PostgresDialect):
            raise TypeError(f"the wake-up flag is PostgreSQL's, not {store.dialect.name}'s")
        self.store, self._sql = store, store.dialect

    def on(self) -> int:
        """Writers notify from now on; returns the horizon of :meth:`ended`: the transactions
        that may have read the flag off and not committed yet are all older than it."""
        with self.store._tx() as conn:
            conn.execute(self._sql.wakeup_on())
        # A snapshot taken after the flag was set: a writer that read it off got its id first.
        with self.store._tx() as conn:
            return int(conn.execute(self._sql.xact_horizon()).scalar_one())

    def off(self) -> None:
        """Writers stop notifying."""
        with self.store._tx() as conn:
            conn.execute(self._sql.wakeup_off())

    def ring(self) -> None:
        """Wake every listener once: each looks, then turns the flag on again if it is idle."""
        with self.store._tx() as conn:
            conn.execute(self._sql.wakeup_ring())

    def ended(self, horizon: int) -> bool:
        """Whether every transaction older than ``horizon`` has committed or rolled back."""
        with self.store._tx() as conn:
            return bool(conn.execute(self._sql.xacts_ended(horizon)).scalar_one())
