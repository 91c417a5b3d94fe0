"""Keeps a claimed batch's lease alive while the worker still works on it."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from relay.config import timing
from relay.exceptions import StoreError
from relay.records import ClaimedEvent
from relay.store.dispatch_path.protocol import Store
from relay.threads import Background

log = logging.getLogger(__name__)


class LeaseKeeper(Background):
    """Renews a batch's lease every third of the lease (:mod:`relay.config.timing`) until stopped.

    Started when the batch is claimed and stopped once its outcomes are recorded, so a live
    worker's lease never runs out under it however long the broker takes; a worker that is
    paused or dead stops renewing and its rows become reclaimable after one lease. A worker
    whose own thread is stuck while this one runs is given :data:`timing.HOLD_MAX_LEASES`
    leases, then renewed no more (the chaos soak saw two relays hang for minutes on a silent
    connection while their keepers kept their rows ``processing``).
    """

    def __init__(
        self, store: Store, worker: str, events: Sequence[ClaimedEvent], lease_seconds: float
    ) -> None:
        super().__init__("relay-lease", self._run)
        self._store, self._worker, self._events = store, worker, events
        self._lease = lease_seconds

    def __enter__(self) -> LeaseKeeper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        until = time.monotonic() + self._lease * timing.HOLD_MAX_LEASES
        while not self._stop.wait(self._lease * timing.RENEW_SHARE_OF_LEASE):
            if time.monotonic() >= until:
                log.error(
                    "batch of %d rows held for %.0fs without an outcome: renewing its lease no "
                    "more, so other workers take the rows when it runs out (the worker is stuck; "
                    "SIGUSR1 prints its stacks)",
                    len(self._events),
                    self._lease * timing.HOLD_MAX_LEASES,
                )
                return
            try:
                held = self._store.renew(self._worker, self._events, self._lease)
            except StoreError as exc:
                if not exc.retryable:
                    log.error("lease renewal failed, renewing no more: %s", exc)
                    return
                log.warning("lease renewal failed, will retry: %s", exc)
                continue
            if held < len(self._events):
                log.warning(
                    "lease lost on %d of %d rows: another worker reclaimed them",
                    len(self._events) - held,
                    len(self._events),
                )
