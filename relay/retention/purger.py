"""The retention purger: deletes sent rows past ``RELAY_RETENTION_SECONDS`` until none is left,
in short paced transactions, one purger at a time per database.

One run takes the purger lease (a row of ``relay_purger``, renewed in every batch's own
transaction, so it works behind a transaction pooler and across Celery beat, ``relay dispatch
--loop`` and ``relay purge-sent`` alike), deletes batches sized by
:class:`relay.retention.pacing.PurgePacing` with rests between them, and gives the lease back
recording the rows it left past the retention (0 when it caught up): ``relay doctor`` and the metric
``relay_outbox_purge_behind_rows`` read that record. Celery's ``relay.purge_sent`` runs one
run per ``RELAY_PURGE_INTERVAL_SECONDS``; :class:`PurgeLoop` does the same in a thread of a
loop runner.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from relay.config import Settings
from relay.exceptions import RelayError
from relay.retention.pacing import PurgePacing
from relay.store.operations.retention import BEHIND_COUNTED_UP_TO, RetentionStore
from relay.threads import Background, Stop

log = logging.getLogger(__name__)

#: How long a purger's lease lasts without renewal: a purger that died mid-run is replaced by
#: the next run after at most this.
PURGE_LEASE_SECONDS = 60.0
#: Most rows past the retention a run counts when it stops early (a bounded scan, well under a
#: second: see :data:`relay.store.operations.retention.BEHIND_COUNTED_UP_TO`).
BEHIND_COUNT_CAP = BEHIND_COUNTED_UP_TO


@dataclass(frozen=True, slots=True)
class PurgeRun:
    """What one purge run did."""

    #: Rows deleted.
    deleted: int = 0
    #: Transactions that deleted rows.
    batches: int = 0
    #: Rows past the retention left when the run ended (0: it caught up).
    behind: int = 0
    #: Seconds the run took.
    seconds: float = 0.0
    #: Another purger held the lease: this run did nothing.
    skipped: bool = False
    #: Batches after which the purge rested longer, yielding to late delivery.
    yields: int = 0


class Purger:
    """One database's retention purge, run by whoever calls :meth:`run`."""

    def __init__(
        self,
        store: RetentionStore,
        retention_seconds: float,
        holder: str,
        *,
        pacing: PurgePacing | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.retention_seconds, self.holder = store, retention_seconds, holder
        self.pacing = pacing or PurgePacing()
        self.clock = clock
        #: The share of its time the purge works now (``PurgePacing.next_duty``), carried from
        #: one run to the next.
        self.duty = self.pacing.duty

    @classmethod
    def from_settings(cls, settings: Settings, holder: str) -> Purger:
        """A purger on ``RELAY_DATABASE_URL`` keeping ``RELAY_RETENTION_SECONDS`` (0: rows are
        deleted at send; the purger then only removes rows sent before the switch)."""
        store = RetentionStore.from_url(settings.database_url)
        return cls(store, settings.retention_seconds, holder)

    def run(
        self, budget_seconds: float = float("inf"), stop: threading.Event | Stop | None = None
    ) -> PurgeRun:
        """Delete until nothing past the retention is left, the budget is spent or ``stop``
        is set; a run that finds the lease held by another purger does nothing."""
        stop = stop or threading.Event()
        started = self.clock()
        if not self.store.take_lease(self.holder, PURGE_LEASE_SECONDS):
            log.info("another purger holds the lease; leaving retention to it")
            return PurgeRun(skipped=True)
        deleted = batches = yields = 0
        size, caught_up, behind = self.pacing.first_batch, False, 0
        duty = self.duty
        try:
            while True:
                t0 = self.clock()
                batch = self.store.purge_batch(
                    self.holder, PURGE_LEASE_SECONDS, self.retention_seconds, size
                )
                elapsed = self.clock() - t0
                if batch is None:
                    log.warning("purger %s lost its lease; stopping", self.holder)
                    return PurgeRun(deleted, batches, 0, self.clock() - started)
                n = batch.deleted
                deleted, batches = deleted + n, batches + (n > 0)
                if n < size:
                    caught_up = True
                    break
                duty = self.pacing.next_duty(duty, batch.lag)
                yields += duty < self.pacing.duty
                spent = self.clock() - started
                if spent >= budget_seconds or stop.wait(self.pacing.pause(elapsed, duty)):
                    break
                size = self.pacing.next_batch(size, elapsed)
            behind = 0 if caught_up else self._behind()
        finally:
            self.store.end_run(self.holder, behind)
            # The next run starts where this one left off: yielding while delivery is late.
            self.duty = duty
        took = self.clock() - started
        log.info(
            "purged %d sent rows in %d batches (%.1fs), %d left", deleted, batches, took, behind
        )
        if yields:
            log.info(
                "the purge yielded to delivery after %d of %d batches (delivery later than %gs)",
                yields, batches, self.pacing.yield_lag_seconds,
            )  # fmt: skip
        return PurgeRun(deleted, batches, behind, took, yields=yields)

    def _behind(self) -> int:
        return self.store.past_retention(self.retention_seconds, BEHIND_COUNT_CAP)

    def close(self) -> None:
        self.store.dispose()


class PurgeLoop(Background):
    """A purge run every ``interval_seconds`` in a daemon thread (``relay dispatch --loop``):
    the first run starts at once, each has the interval as its budget, a run that left rows
    past the retention is followed at once by the next, and a run that another purger's lease
    skips waits for the next interval."""

    def __init__(self, purger: Purger, interval_seconds: float) -> None:
        super().__init__("relay-purger", self._run)
        self.purger, self.interval = purger, interval_seconds

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                run = self.purger.run(budget_seconds=self.interval, stop=self._stop)
            except RelayError as exc:
                log.warning("retention purge failed, next try in %gs: %s", self.interval, exc)
            else:
                if run.behind > 0:
                    continue  # stopped by its budget with rows left: keep going at once
            self._stop.wait(self.interval)

    def stop(self, timeout: float | None = 10.0) -> None:
        super().stop(timeout)
        self.purger.close()


__all__ = ["BEHIND_COUNT_CAP", "PURGE_LEASE_SECONDS", "PurgeLoop", "PurgeRun", "Purger"]
