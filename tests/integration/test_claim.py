"""The leased claim against real databases: exactly-once claims, reclaim, fencing, ordering."""

from __future__ import annotations

import multiprocessing as mp
import time

import pytest
import sqlalchemy as sa

from relay.records import Rescheduled
from relay.store.dispatch_path.store import DispatchStore
from relay.store.engine import create_engine
from relay.store.operations.store import OperationsStore
from tests.support.rows import count_by_status, enqueue_many, expire_leases, make_due, rows


def _claimer(url: str, worker: str, batch: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    store = DispatchStore(create_engine(url))
    claimed: list[int] = []
    empty = 0
    while empty < 3:
        events = store.claim(worker, batch, lease_seconds=300)
        if not events:
            empty += 1
            time.sleep(0.02)
            continue
        empty = 0
        claimed.extend(e.id for e in events)
        store.complete(worker, sent=events)
    store.dispose()
    out.put((worker, claimed))


@pytest.mark.parametrize(("processes", "total"), [(8, 10_000)])
def test_concurrent_claimers_claim_each_row_exactly_once(
    db_url: str, engine: sa.Engine, processes: int, total: int
) -> None:
    """N processes racing over the same pending rows: every row claimed once, none twice."""
    ids = set(enqueue_many(engine, total))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_claimer, args=(db_url, f"w{i}", 37, out)) for i in range(processes)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    claimed = [i for _, ids_ in results for i in ids_]
    assert len(claimed) == len(set(claimed)), "a row was claimed twice"
    assert set(claimed) == ids
    assert sum(1 for _, ids_ in results if ids_) >= 2, "the race never happened"
    assert count_by_status(engine) == {"sent": total}


def test_claim_sets_the_lease_in_database_time(store: DispatchStore, engine: sa.Engine) -> None:
    """A claim marks rows processing, locked_by me, attempt+1, locked_until = db now + lease."""
    (row_id,) = enqueue_many(engine, 1)
    with engine.connect() as conn:
        before = conn.execute(sa.select(store.dialect.now())).scalar()
    (event,) = store.claim("w1", 10, lease_seconds=60)
    row = rows(engine, row_id)[row_id]
    assert (row["status"], row["locked_by"], row["attempt"], event.attempt) == (
        "processing",
        "w1",
        1,
        1,
    )
    lease = (row["locked_until"] - before).total_seconds()
    assert 59 <= lease <= 61
    assert store.claim("w2", 10, lease_seconds=60) == [], "a live lease must not be claimable"


def test_expired_lease_is_reclaimed_and_late_completion_is_fenced(
    store: DispatchStore, engine: sa.Engine
) -> None:
    """Worker A's lease expires, B reclaims with attempt+1; A's late outcomes change nothing."""
    (row_id,) = enqueue_many(engine, 1)
    (held_by_a,) = store.claim("A", 10, lease_seconds=60)
    expire_leases(engine)
    (held_by_b,) = store.claim("B", 10, lease_seconds=60)
    assert held_by_b.id == row_id
    assert held_by_b.attempt == held_by_a.attempt + 1

    assert store.complete("A", sent=[held_by_a]).sent == 0
    assert store.complete("A", rescheduled=[Rescheduled(held_by_a, 0.0, "late")]).rescheduled == 0
    assert store.complete("A", sent=[held_by_a]).lost == 1
    row = rows(engine, row_id)[row_id]
    assert (row["status"], row["locked_by"], row["attempt"]) == ("processing", "B", 2)

    assert store.complete("B", sent=[held_by_b]).sent == 1
    assert rows(engine, row_id)[row_id]["status"] == "sent"


def test_rescheduled_row_waits_for_its_backoff(store: DispatchStore, engine: sa.Engine) -> None:
    """A rescheduled row is not claimable before next_retry_at, and is afterwards."""
    (row_id,) = enqueue_many(engine, 1)
    (event,) = store.claim("w", 10, lease_seconds=60)
    assert store.complete("w", rescheduled=[Rescheduled(event, 60.0, "nack")]).rescheduled == 1
    row = rows(engine, row_id)[row_id]
    assert (row["status"], row["last_error"], row["locked_by"]) == ("pending", "nack", None)
    assert store.claim("w", 10, lease_seconds=60) == []
    make_due(engine)
    (again,) = store.claim("w", 10, lease_seconds=60)
    assert again.attempt == 2


def test_claim_takes_oldest_first_and_respects_the_limit(
    store: DispatchStore, engine: sa.Engine
) -> None:
    """Rows come out in id order, at most ``limit`` per claim."""
    ids = enqueue_many(engine, 25)
    first = store.claim("w", 10, lease_seconds=60)
    assert [e.id for e in first] == ids[:10]


def test_ordering_key_leases_a_run_per_key_and_nothing_behind_it(
    store: DispatchStore, engine: sa.Engine
) -> None:
    """A claim leases half the keys it finds, each as a run in sequence order, beside unordered
    rows; while a run is held nobody can claim that key; the next claim takes the other key."""
    a = enqueue_many(engine, 3, ordering_key="order-1")
    b = enqueue_many(engine, 2, ordering_key="order-2")
    free = enqueue_many(engine, 2)
    first = store.claim("w", 4, lease_seconds=60)
    assert [(e.id, e.seq) for e in first] == [(a[0], 1), (a[1], 2), (a[2], 3), (free[0], None)]
    second = store.claim("w2", 100, lease_seconds=60)
    assert [e.id for e in second] == [b[0], b[1], free[1]]
    assert store.claim("w3", 100, lease_seconds=60) == [], "both keys are held by their runs"
    assert store.complete("w2", sent=second).sent == 3
    enqueue_many(engine, 1, ordering_key="order-2")
    (nxt,) = store.claim("w3", 100, lease_seconds=60)
    assert (nxt.ordering_key, nxt.seq) == ("order-2", 3)


def test_failed_head_holds_its_key(store: DispatchStore, engine: sa.Engine) -> None:
    """A key whose head row is failed is held until an operator retries it; then the key goes
    on in order from that row."""
    a = enqueue_many(engine, 2, ordering_key="k")
    from relay.records import Buried

    head, second = store.claim("w", 100, lease_seconds=60)
    store.complete("w", buried=[Buried(head, "poison")])
    store.release("w", [second], 0.0, "an earlier row of its key failed")
    assert store.claim("w", 100, lease_seconds=60) == []
    assert OperationsStore(engine).retry_failed([a[0]]).changed == 1
    again = store.claim("w", 100, lease_seconds=60)
    assert [(e.id, e.attempt) for e in again] == [(a[0], 1), (a[1], 1)]


def test_purging_a_failed_head_lets_its_key_go_on(store: DispatchStore, engine: sa.Engine) -> None:
    """Purging a failed head moves its key past it: the next row becomes the head."""
    a = enqueue_many(engine, 2, ordering_key="k")
    from relay.records import Buried

    (head,) = store.claim("w", 1, lease_seconds=60)
    store.complete("w", buried=[Buried(head, "poison")])
    assert OperationsStore(engine).purge_failed([a[0]]).changed == 1
    (nxt,) = store.claim("w", 100, lease_seconds=60)
    assert (nxt.id, nxt.seq) == (a[1], 2)
