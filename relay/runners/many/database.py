"""One database of a many-databases relay process (:mod:`relay.runners.many.workers`): its
dispatcher on an engine of one connection, built when first needed and closed when the
database goes idle, its retention purge run inside its units, and where its connections count.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from relay.config import Settings, timing
from relay.dispatch.dispatcher import Dispatcher
from relay.exceptions import RelayError
from relay.policy import Backoff
from relay.publishers import Publisher
from relay.retention.purger import Purger
from relay.store.dispatch_path.store import DispatchStore
from relay.store.operations.retention import RetentionStore
from relay.wakeup.serverwatch import APPLICATION_NAME
from relay.wakeup.watcher import supports

log = logging.getLogger("relay")

#: A unit of work: one drain of at most this long (its first batch always, then more while
#: time is left), after which the database goes back behind the less-served ones.
QUANTUM_SECONDS = 0.25
#: The longest a purge runs inside one unit; a purge that did not catch up goes on next unit.
PURGE_QUANTUM_SECONDS = 1.0
#: The databases' first purges are spread over this long after the start.
FIRST_PURGES_SECONDS = 60.0
#: Idle looks a second, in all, at the databases nothing watches (MySQL, MariaDB, SQLite,
#: ``RELAY_NOTIFY=0``): each costs a connection, so their slowest poll grows with their number.
POLLED_LOOKS_PER_SECOND = 50.0


def polled_ceiling(settings: Settings, polled: int) -> float:
    """The slowest poll of a database nothing watches, among ``polled`` such databases:
    ``Settings.idle_poll_seconds`` (one database's), or slower when there are many."""
    return max(settings.idle_poll_seconds, polled / POLLED_LOOKS_PER_SECOND)


@dataclass
class Database:
    """One database's relay parts, built when first needed, its connection closed when idle."""

    name: str
    settings: Settings
    dispatcher: Dispatcher | None = None
    store: DispatchStore | None = None
    purger: Purger | None = None
    purge_at: float = 0.0
    backoff: Backoff = field(
        default_factory=lambda: Backoff(
            timing.DATABASE_RETRY_FIRST_SECONDS, timing.DATABASE_RETRY_MAX_SECONDS
        )
    )
    failed: bool = False

    def relay(self, publisher: Publisher, observer: Any) -> Dispatcher:
        if self.dispatcher is None:
            # One connection at most: the budget counts a database as one slot. The drain's
            # database thread, the lease keeper and the recheck take turns on it (each holds
            # it for one short transaction), and a turn never waits longer than a lease share.
            store = self.store = DispatchStore.from_settings(
                self.settings,
                pool_size=1,
                max_overflow=0,
                pool_timeout=self.settings.lease_seconds * timing.RENEW_SHARE_OF_LEASE,
                # Connections live for a unit or two: a ping before each of its transactions
                # would cost a round trip each; a dead one fails the unit, which retries.
                pool_pre_ping=False,
                **_named(self.settings.database_url),
            )
            self.dispatcher = Dispatcher(store, publisher, self.settings, observer=observer)
        self.dispatcher.publisher = publisher
        return self.dispatcher

    def close_connection(self) -> None:
        """Close the connection (and the drain's database thread) until the next unit."""
        if self.dispatcher is not None:
            self.dispatcher.close()
        if self.store is not None:
            self.store.engine.dispose()

    def purge(self, stop: threading.Event, holder: str) -> None:
        if self.store is None:
            return
        if self.purger is None:
            store = RetentionStore(self.store.engine)
            self.purger = Purger(store, self.settings.retention_seconds, holder)
        try:
            run = self.purger.run(budget_seconds=PURGE_QUANTUM_SECONDS, stop=stop)
        except RelayError as exc:  # the relaying goes on; the purge tries again next interval
            log.warning("retention purge of database %r failed: %s", self.name, exc)
            self.purge_at = time.monotonic() + self.settings.purge_interval_seconds
            return
        caught_up = run.skipped or run.behind == 0
        self.purge_at = time.monotonic() + (
            self.settings.purge_interval_seconds if caught_up else QUANTUM_SECONDS
        )


def _named(url: str) -> dict[str, Any]:
    """Engine arguments naming the relay to a PostgreSQL server (others keep their own)."""
    return {"connect_args": {"application_name": APPLICATION_NAME}} if supports(url) else {}
