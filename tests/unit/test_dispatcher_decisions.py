"""The dispatcher's decisions on the shipped doubles: an in-memory store and publisher, no
database, no broker (the same decisions against real services: tests/integration)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from relay.config import Settings
from relay.dispatch.dispatcher import Dispatcher
from relay.records import ClaimedEvent, PublishResult, Status
from relay.testing import InMemoryPublisher, InMemoryStore

LEASE = 30.0


class Clock:
    """Monotonic seconds that move only when a test moves them."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _dispatcher(
    store: InMemoryStore, publisher: object, clock: Clock, max_attempts: int = 3
) -> Dispatcher:
    settings = Settings(lease_seconds=LEASE, max_attempts=max_attempts)
    return Dispatcher(
        store,
        publisher,  # type: ignore[arg-type]  # a double with publish() and close()
        settings,
        worker_id="w1",
        rng=random.Random(7),
        clock=clock,
    )


def test_a_confirmed_event_is_marked_sent() -> None:
    """The broker confirms: the row becomes sent and nothing is left to claim."""
    clock = Clock()
    store = InMemoryStore(clock=clock)
    row_id = store.add("order.created", {"n": 1})
    publisher = InMemoryPublisher()
    report = _dispatcher(store, publisher, clock).run_once()
    assert (report.claimed, report.sent, report.lost) == (1, 1, 0)
    assert store.status_of(row_id) is Status.SENT
    assert publisher.ids == [row_id]


def test_a_refused_publish_is_rescheduled_after_its_backoff() -> None:
    """A nack with attempts left: back to pending, its error kept, claimable only later."""
    clock = Clock()
    store = InMemoryStore(clock=clock)
    row_id = store.add("order.created", {"n": 1})
    report = _dispatcher(store, InMemoryPublisher(reject_times=1), clock).run_once()
    row = store.rows[row_id]
    assert report.rescheduled == 1
    assert (row.status, row.attempt, row.last_error) == (Status.PENDING, 1, "simulated nack")
    assert row.next_retry_at is not None
    assert row.next_retry_at >= clock.now


def test_the_last_attempt_buries_the_event() -> None:
    """A nack on the last allowed attempt makes the row failed (a dead letter)."""
    clock = Clock()
    store = InMemoryStore(clock=clock)
    row_id = store.add("order.created", {"n": 1})
    publisher = InMemoryPublisher(reject_times=1)
    report = _dispatcher(store, publisher, clock, max_attempts=1).run_once()
    assert report.buried == 1
    assert store.status_of(row_id) is Status.FAILED


def test_a_broker_outage_gives_the_attempt_back() -> None:
    """An unreachable broker releases the batch without spending its attempt."""
    clock = Clock()
    store = InMemoryStore(clock=clock)
    row_id = store.add("order.created", {"n": 1})
    report = _dispatcher(store, InMemoryPublisher(unavailable_times=1), clock).run_once()
    row = store.rows[row_id]
    assert report.broker_error is not None
    assert report.released == 1
    assert (row.status, row.attempt) == (Status.PENDING, 0)


class _Stalling:
    """Publishes, but meanwhile the lease runs out and another worker reclaims the rows."""

    def __init__(self, store: InMemoryStore, clock: Clock) -> None:
        self.store, self.clock = store, clock

    def publish(self, events: Sequence[ClaimedEvent]) -> PublishResult:
        self.clock.now += LEASE + 1
        assert len(self.store.claim("thief", 10, LEASE)) == len(events)
        return PublishResult(confirmed=list(events))

    def close(self) -> None:
        pass


def test_a_lost_lease_changes_nothing() -> None:
    """Outcomes of rows another worker reclaimed are fenced out and counted as lost."""
    clock = Clock()
    store = InMemoryStore(clock=clock)
    row_id = store.add("order.created", {"n": 1})
    report = _dispatcher(store, _Stalling(store, clock), clock).run_once()
    row = store.rows[row_id]
    assert (report.sent, report.lost) == (0, 1)
    assert (row.status, row.locked_by, row.attempt) == (Status.PROCESSING, "thief", 2)


def test_a_failed_head_holds_back_the_rest_of_its_key() -> None:
    """A key's failed row stops its run: the rows after it are given back, unspent."""
    clock = Clock()
    store = InMemoryStore(clock=clock)
    head = store.add("order.created", {"n": 1}, ordering_key="order-1")
    second = store.add("order.paid", {"n": 2}, ordering_key="order-1")
    report = _dispatcher(store, InMemoryPublisher(reject_times=1), clock).run_once()
    assert (report.rescheduled, report.released, report.sent) == (1, 1, 0)
    assert store.rows[head].attempt == 1
    assert (store.status_of(second), store.rows[second].attempt) == (Status.PENDING, 0)


def test_a_key_goes_out_in_order_across_batches() -> None:
    """Batches of one: each run_once sends the key's next row, never one out of turn."""
    clock = Clock()
    store = InMemoryStore(clock=clock)
    ids = [store.add("order.step", {"n": n}, ordering_key="order-1") for n in range(3)]
    store.add("audit.note", {"n": 9})
    publisher = InMemoryPublisher()
    settings = Settings(batch_size=1, batch_max=1)
    dispatcher = Dispatcher(store, publisher, settings, clock=clock)
    for _ in range(4):
        dispatcher.run_once()
    assert [i for i in publisher.ids if i in ids] == ids
    assert {store.status_of(i) for i in ids} == {Status.SENT}


def test_an_expired_lease_is_taken_back_once_the_sweep_is_due() -> None:
    """A crashed worker's lease runs out while this dispatcher keeps claiming: a claim within a
    second of the last sweep reads pending rows only and leaves the row alone; the first claim
    a second after it takes the row back, with one more attempt."""
    clock = Clock()
    store = InMemoryStore(clock=clock)
    row_id = store.add("order.created", {"n": 1})
    assert len(store.claim("crashed", 10, 0.3)) == 1  # its lease ends at +0.3 s
    publisher = InMemoryPublisher()
    dispatcher = _dispatcher(store, publisher, clock)  # a 30 s lease: a sweep a second
    assert dispatcher.run_once().claimed == 0  # swept at +0: the lease still ran
    clock.now += 0.5
    assert dispatcher.run_once().claimed == 0  # expired, but no sweep is due yet
    clock.now += 0.5
    report = dispatcher.run_once()
    assert (report.claimed, report.sent) == (1, 1)
    assert store.rows[row_id].attempt == 2
    assert publisher.ids == [row_id]


class _Batches(InMemoryPublisher):
    """Records the size of each batch it is handed and the keys' numbers in publish order."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []
        self.order: list[int | None] = []

    def publish(self, events: Sequence[ClaimedEvent]) -> PublishResult:
        self.sizes.append(len(events))
        self.order += [e.seq for e in events]
        return super().publish(events)


def test_a_hot_keys_runs_grow_while_the_next_run_is_leased_ahead() -> None:
    """One key's backlog: each claim made while a run is published leases the key's next run,
    so claims come back full and grow from RELAY_BATCH_SIZE to RELAY_BATCH_MAX (an empty
    claim ahead used to start them again at RELAY_BATCH_SIZE), and the key goes out once, in
    order."""
    clock = Clock()
    store = InMemoryStore(clock=clock)
    for n in range(150):
        store.add("order.created", {"n": n}, ordering_key="hot")
    publisher = _Batches()
    settings = Settings(lease_seconds=LEASE, batch_size=10, batch_max=40)
    dispatcher = Dispatcher(store, publisher, settings, worker_id="w1", clock=clock)
    report = dispatcher.drain()
    dispatcher.close()
    assert publisher.sizes == [10, 20, 40, 40, 40]
    assert publisher.order == list(range(1, 151))
    assert (report.sent, report.released, report.lost) == (150, 0, 0)
    assert store.progress["hot"] == 150
