"""Ordered runs on every database: the fence at enqueue, runs per key, and what a failure in the
middle of a run does when confirms are awaited per batch."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.config import Settings
from relay.dispatch.dispatcher import Dispatcher
from relay.records import ClaimedEvent, PublishResult
from relay.store.dispatch_path.store import DispatchStore
from relay.store.schema.tables import outbox, outbox_progress
from relay.testing import InMemoryPublisher
from tests.support.rows import enqueue_many, make_due, rows


@dataclass
class _NackOnce:
    """Confirms a whole batch except one row, nacked once: confirms awaited per batch mean the
    rows after it were already accepted by the broker when the nack arrives."""

    nack_seq: int
    published: list[tuple[int | None, int]] = field(default_factory=list)
    nacked: bool = False

    def publish(self, events: Sequence[ClaimedEvent]) -> PublishResult:
        result = PublishResult()
        for event in events:
            assert event.seq is not None
            self.published.append((event.seq, event.attempt))
            if event.seq == self.nack_seq and not self.nacked:
                self.nacked = True
                result.rejected.append((event, "simulated nack"))
            else:
                result.confirmed.append(event)
        return result

    def close(self) -> None:
        pass


def _progress(engine: sa.Engine, key: str) -> int:
    with engine.connect() as conn:
        query = sa.select(outbox_progress.c.sent_seq).where(outbox_progress.c.ordering_key == key)
        return int(conn.execute(query).scalar_one())


def test_enqueue_numbers_each_key_from_one_and_leaves_unkeyed_rows_unnumbered(
    engine: sa.Engine,
) -> None:
    """Keyed rows get 1, 2, ... per key; unkeyed rows and rolled-back numbers leave no trace."""
    with Session(engine) as session, session.begin():
        relay.enqueue(session, "e", {}, ordering_key="a")
    with Session(engine) as session:
        session.begin()
        relay.enqueue(session, "e", {}, ordering_key="a")
        session.rollback()
    enqueue_many(engine, 2, ordering_key="a")
    enqueue_many(engine, 1, ordering_key="b")
    enqueue_many(engine, 1)
    got = sorted((r["ordering_key"] or "", r["seq"] or 0) for r in rows(engine).values())
    assert got == [("", 0), ("a", 1), ("a", 2), ("a", 3), ("b", 1)]


def test_a_claim_leases_a_hot_key_run_up_to_the_batch_size(
    store: DispatchStore, engine: sa.Engine
) -> None:
    """One key's backlog comes out as one run in sequence order, at most ``limit`` rows."""
    enqueue_many(engine, 30, ordering_key="hot")
    run = store.claim("w", 25, lease_seconds=60)
    assert [e.seq for e in run] == list(range(1, 26))
    assert store.claim("w2", 25, lease_seconds=60) == [], "the key is held by the run"
    assert store.complete("w", sent=run).sent == 25
    assert _progress(engine, "hot") == 25
    assert [e.seq for e in store.claim("w2", 25, lease_seconds=60)] == list(range(26, 31))


def test_a_claim_following_a_run_in_flight_leases_the_keys_next_run(
    store: DispatchStore, engine: sa.Engine
) -> None:
    """While a worker's run of a key is in flight, its next claim may go on with the key from
    the run's last number (no other worker can take the key meanwhile); the next run is marked
    sent only after the run before it."""
    enqueue_many(engine, 60, ordering_key="hot")
    run = store.claim("w", 25, lease_seconds=60)
    ahead = store.claim("w", 25, lease_seconds=60, following=[("hot", 25)])
    assert [e.seq for e in ahead] == list(range(26, 51))
    assert store.claim("w2", 25, lease_seconds=60) == [], "the key is held by the runs"
    assert store.complete("w", sent=ahead).sent == 0, "not before the run before it"
    assert store.complete("w", sent=run).sent == 25
    assert store.complete("w", sent=ahead).sent == 25
    assert _progress(engine, "hot") == 50
    assert [e.seq for e in store.claim("w2", 25, lease_seconds=60)] == list(range(51, 61))


class _Following(DispatchStore):
    """A dispatch store that notes the runs each claim was asked to follow."""

    followed: list[list[tuple[str, int]]]

    def complete_and_claim(self, worker: str, **kwargs: Any) -> Any:
        self.followed.append(list(kwargs.get("following", ())))
        return super().complete_and_claim(worker, **kwargs)


def test_a_drain_leases_a_hot_keys_next_run_while_publishing_and_keeps_its_order(
    engine: sa.Engine, settings: Settings
) -> None:
    """One hot key in batches of 10: each claim made while a run is published goes on with
    the key from that run's last number, and the key is published once, in order."""
    store = _Following(engine)
    store.followed = []
    enqueue_many(engine, 45, ordering_key="hot")
    publisher = InMemoryPublisher()
    fixed = dataclasses.replace(settings, batch_size=10, batch_max=10)
    dispatcher = Dispatcher(store, publisher, fixed)
    report = dispatcher.drain()
    dispatcher.close()
    assert [m.headers["ordering_seq"] for m in publisher.messages] == list(range(1, 46))
    assert (report.sent, report.lost, report.released) == (45, 0, 0)
    assert [f for f in store.followed if f] == [[("hot", n)] for n in (10, 20, 30, 40, 45)]
    assert _progress(engine, "hot") == 45


def test_a_nack_in_a_run_gives_back_the_keys_next_run_leased_meanwhile(
    engine: sa.Engine, settings: Settings
) -> None:
    """Row 5 of the first run is nacked while the key's next run (11-20) was already leased
    behind it: that run is given back unpublished, without spending an attempt, and the key
    goes on from row 5 once it is due: nothing of the key overtakes the failed row."""
    store = DispatchStore(engine)
    enqueue_many(engine, 30, ordering_key="k")
    publisher = _NackOnce(nack_seq=5)
    fixed = dataclasses.replace(settings, batch_size=10, batch_max=10)
    dispatcher = Dispatcher(store, publisher, fixed)
    first = dispatcher.drain()
    assert first.rescheduled == 1
    assert first.released >= 15, "6-10 behind the nack, 11-20 leased ahead"
    for _ in range(3):  # row 5's backoff (full jitter) may have passed within the first drain
        make_due(engine)
        dispatcher.drain()
    dispatcher.close()
    expected = [(s, 1) for s in range(1, 11)] + [(5, 2)] + [(s, 1) for s in range(6, 31)]
    assert publisher.published == expected
    assert _progress(engine, "k") == 30


def test_a_run_stops_at_a_number_that_is_not_committed_yet(engine: sa.Engine) -> None:
    """A key's rows after a number held by an open transaction are not claimable, and neither
    is anything after it, until that transaction commits (the commit-order fence)."""
    store = DispatchStore(engine)
    enqueue_many(engine, 1, ordering_key="k")
    if engine.dialect.name == "sqlite":
        pytest.skip("SQLite has one writer: an open enqueue blocks every other transaction")
    first = engine.connect()
    tx = first.begin()
    relay.enqueue(first, "e", {"n": "slow"}, ordering_key="k")  # takes number 2, stays open
    later = threading.Thread(target=enqueue_many, args=(engine, 1), kwargs={"ordering_key": "k"})
    later.start()  # waits on key k's sequence row until the first transaction ends
    (head,) = store.claim("w", 100, lease_seconds=60)
    assert head.seq == 1
    store.complete("w", sent=[head])
    assert store.claim("w", 100, lease_seconds=60) == [], "number 2 is not committed yet"
    tx.commit()
    first.close()
    later.join(timeout=30)
    assert [e.seq for e in store.claim("w", 100, lease_seconds=60)] == [2, 3]


def test_a_nack_mid_run_marks_the_rows_before_it_and_gives_back_the_rest(
    engine: sa.Engine, settings: Settings
) -> None:
    """Confirms per batch: row 5 of 10 is nacked after rows 6-10 were accepted. Rows 1-4 are
    sent; row 5 is rescheduled (one attempt spent); rows 6-10 are given back without spending
    an attempt and published again after row 5, in order (duplicates, never reordering)."""
    store = DispatchStore(engine)
    ids = enqueue_many(engine, 10, ordering_key="k")
    publisher = _NackOnce(nack_seq=5)
    dispatcher = Dispatcher(store, publisher, settings)
    first = dispatcher.run_once()
    assert (first.sent, first.rescheduled, first.released) == (4, 1, 5)
    got = rows(engine, *ids)
    assert [got[i]["status"] for i in ids] == ["sent"] * 4 + ["pending"] * 6
    assert [got[i]["attempt"] for i in ids[4:]] == [1] + [0] * 5
    assert _progress(engine, "k") == 4
    make_due(engine)
    dispatcher.drain()
    dispatcher.close()
    assert publisher.published[10:] == [(5, 2), *((s, 1) for s in range(6, 11))]
    assert _progress(engine, "k") == 10


def test_unroutable_row_holds_its_key_and_the_rest_of_the_run_is_withheld(
    engine: sa.Engine, settings: Settings
) -> None:
    """A row refused before it is sent stops its key's run in that batch: the rows after it are
    not published at all; unkeyed rows and other keys go on."""
    store = DispatchStore(engine)
    enqueue_many(engine, 2, ordering_key="k")
    (poison,) = enqueue_many(engine, 1, event_type="poison", ordering_key="k")
    enqueue_many(engine, 2, ordering_key="k")
    other = enqueue_many(engine, 3, ordering_key="other")
    publisher = InMemoryPublisher(unroutable={"poison"})
    slow_retry = dataclasses.replace(settings, backoff_base_seconds=30, backoff_max_seconds=60)
    dispatcher = Dispatcher(store, publisher, slow_retry)
    report = dispatcher.run_once()  # key k's run
    report.add(dispatcher.run_once())  # key "other"; k waits on its poison row
    published = [
        (m.headers.get("ordering_key"), m.headers.get("ordering_seq")) for m in publisher.messages
    ]
    assert published == [("k", 1), ("k", 2), ("other", 1), ("other", 2), ("other", 3)]
    assert (report.rescheduled, report.sent) == (1, 5)
    assert rows(engine, poison)[poison]["status"] == "pending"
    assert all(r["status"] == "sent" for r in rows(engine, *other).values())


def test_plain_sql_keyed_row_without_a_number_is_numbered_in_its_key(
    store: DispatchStore, engine: sa.Engine
) -> None:
    """A keyed row written by plain SQL without ``seq`` gets its key's next number from the
    database (migration 0012) and is relayed in its key's order."""
    enqueue_many(engine, 1, ordering_key="k")
    with engine.begin() as conn:
        conn.execute(sa.insert(outbox).values(event_type="plain", payload={}, ordering_key="k"))
    claimed = store.claim("w", 100, lease_seconds=60)
    assert [(e.event_type, e.seq) for e in claimed] == [("test.event", 1), ("plain", 2)]


def test_lock_keys_lets_crossing_multi_key_transactions_wait_instead_of_deadlocking(
    engine: sa.Engine,
) -> None:
    """Two transactions enqueueing keys a, b in opposite orders both commit when each starts with
    ``relay.lock_keys`` over all its keys."""
    if engine.dialect.name == "sqlite":
        pytest.skip("SQLite has one writer at a time: no row locks to deadlock on")
    errors: list[BaseException] = []
    first_holds_a = threading.Event()

    def write(keys: list[str]) -> None:
        try:
            if keys[0] == "b":
                assert first_holds_a.wait(timeout=30)
            with Session(engine) as session, session.begin():
                relay.lock_keys(session, keys)
                relay.enqueue(session, "e", {}, ordering_key=keys[0])
                first_holds_a.set()
                relay.enqueue(session, "e", {}, ordering_key=keys[1])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(k,)) for k in (["a", "b"], ["b", "a"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    got = sorted((r["ordering_key"], r["seq"]) for r in rows(engine).values())
    assert got == [("a", 1), ("a", 2), ("b", 1), ("b", 2)]


def test_a_run_whose_lease_was_taken_over_is_not_marked_and_the_new_holder_moves_the_key(
    store: DispatchStore, engine: sa.Engine
) -> None:
    """A relay whose run was reclaimed after its lease ran out records nothing for it (the
    fence); the relay that holds the run now marks it and moves the key's progress."""
    from tests.support.rows import expire_leases

    enqueue_many(engine, 4, ordering_key="k")
    stale = store.claim("old", 100, lease_seconds=60)
    expire_leases(engine)
    fresh = store.claim("new", 100, lease_seconds=60)
    assert [e.seq for e in fresh] == [1, 2, 3, 4]
    done = store.complete("old", sent=stale)
    assert (done.sent, done.lost) == (0, 4)
    assert _progress(engine, "k") == 0
    assert store.complete("new", sent=fresh).sent == 4
    assert _progress(engine, "k") == 4
