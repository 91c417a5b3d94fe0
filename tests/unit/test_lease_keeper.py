"""The lease keeper on a counting double: it renews while a batch is held, and gives a batch
held past HOLD_MAX_LEASES back to the fleet instead of renewing it for ever."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from relay.config import timing
from relay.dispatch.lease import LeaseKeeper
from relay.records import ClaimedEvent
from tests.support.env import wait_until

LEASE = 0.3


class CountingStore:
    """Counts renewals; every row is still held."""

    def __init__(self) -> None:
        self.renewals = 0
        self.lock = threading.Lock()

    def renew(self, worker: str, events: Sequence[ClaimedEvent], lease_seconds: float) -> int:
        with self.lock:
            self.renewals += 1
        return len(events)


@pytest.mark.timeout(20)
def test_a_batch_held_past_its_bound_is_renewed_no_more() -> None:
    """Renewed every third of a lease, then no more once HOLD_MAX_LEASES leases have passed:
    the keeper's thread ends by itself while the batch is still 'held'."""
    store = CountingStore()
    event = ClaimedEvent(1, "t", {}, None, None, 1, datetime.now(UTC))
    keeper = LeaseKeeper(store, "w1", [event], LEASE).start()  # type: ignore[arg-type]
    try:
        wait_until(lambda: store.renewals >= 2, 5, "renewals while held")
        wait_until(lambda: not keeper._thread.is_alive(), 5 + LEASE * timing.HOLD_MAX_LEASES, "")
        stopped_at = store.renewals
        assert stopped_at <= timing.HOLD_MAX_LEASES / timing.RENEW_SHARE_OF_LEASE
    finally:
        keeper.stop()
    assert store.renewals == stopped_at
