"""Per-key ordering end to end, on every database: two `relay dispatch --loop` processes, real
RabbitMQ, producers in other transactions; what a consumer receives, per key."""

from __future__ import annotations

import random
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

import relay
from relay.store.engine import create_engine
from relay.store.schema.tables import outbox
from tests.support.broker import Collector, Received
from tests.support.env import wait_until
from tests.support.fleet import RELAY_BIN, Fleet, fleet_env

pytestmark = [pytest.mark.serial, pytest.mark.timeout(300)]


@pytest.fixture
def any_engine(db_url: str) -> Iterator[sa.Engine]:
    """An engine on a fresh database of each enabled kind (the acceptance default is PG only)."""
    eng = create_engine(db_url)
    yield eng
    eng.dispose()


@pytest.fixture
def fleet(
    db_url: str, amqp_url: str, exchange_name: str, tmp_path: Path, collector: Collector
) -> Iterator[Fleet]:
    """Two relay processes on the test's database (the collector's queue is bound first)."""
    relays = Fleet(fleet_env(db_url, amqp_url, exchange_name, max_attempts=2), tmp_path)
    relays.start(2)
    yield relays
    codes = relays.stop()
    assert all(code == 0 for code in codes.values()), relays.logs()


def _first_arrivals(received: list[Received]) -> dict[str, list[int]]:
    """Per key, the sequence numbers in the order their first copy arrived."""
    seen: set[str] = set()
    order: dict[str, list[int]] = defaultdict(list)
    for m in received:
        if m.message_id in seen:
            continue
        seen.add(m.message_id)
        order[m.headers["ordering_key"]].append(int(m.headers["ordering_seq"]))
    return order


def _is_deadlock(exc: sa_exc.DBAPIError) -> bool:
    return "deadlock" in str(exc.orig).lower()


def test_an_open_transaction_is_never_overtaken_by_a_later_one_of_its_key(
    any_engine: sa.Engine, fleet: Fleet, collector: Collector
) -> None:
    """For 6 keys, transaction A enqueues "first" and stays open 3 s while transaction B
    enqueues "second" and commits: B waits for A at the key, and every key's consumer receives
    "first" before "second"."""
    keys = [f"order-{i}" for i in range(6)]
    b_done = threading.Event()
    b_errors: list[BaseException] = []

    def transaction_b() -> None:
        try:
            with Session(any_engine) as session, session.begin():
                for key in keys:
                    relay.enqueue(session, "shop.order", {"n": "second"}, ordering_key=key)
            b_done.set()
        except BaseException as exc:
            b_errors.append(exc)

    with Session(any_engine) as a:
        a.begin()
        relay.lock_keys(a, keys)
        for key in keys:
            relay.enqueue(a, "shop.order", {"n": "first"}, ordering_key=key)
        b = threading.Thread(target=transaction_b)
        b.start()
        # The scenario itself, not synchronisation: A stays open 3 s while B tries to commit.
        time.sleep(3)
        assert not b_done.is_set(), "B committed a key A holds"
        a.commit()
    b.join(timeout=60)
    assert not b_errors, b_errors
    received = collector.drain(2 * len(keys), timeout=60, settle=0.5)
    by_key: dict[str, list[str]] = defaultdict(list)
    for m in received:
        by_key[m.headers["ordering_key"]].append(m.body["n"])
    assert {k: v[:2] for k, v in by_key.items()} == {k: ["first", "second"] for k in keys}
    fleet.assert_alive()


def test_interleaved_producers_with_rollbacks_reach_the_consumer_in_commit_order(
    any_engine: sa.Engine, fleet: Fleet, collector: Collector
) -> None:
    """6 producer threads write 1-3 events per transaction over 8 keys, a fifth of the
    transactions rolled back, while two relays run: per key the consumer receives numbers 1..n
    in order with no gap, exactly the committed events, none rolled back."""
    keys = [f"k{i}" for i in range(8)]
    committed: dict[str, str] = {}  # payload id -> key
    rolled_back: set[str] = set()
    lock = threading.Lock()
    errors: list[BaseException] = []
    sqlite = any_engine.dialect.name == "sqlite"

    def producer(worker: int) -> None:
        rng = random.Random(worker)
        try:
            for txn in range(30 if sqlite else 60):
                picked = [rng.choice(keys) for _ in range(rng.randint(1, 3))]
                events = [(f"{worker}-{txn}-{i}", key) for i, key in enumerate(picked)]
                rollback = rng.random() < 0.2
                for _ in range(5):  # a deadlock victim (MySQL, a brand-new key) is retried
                    try:
                        with Session(any_engine) as session:
                            session.begin()
                            relay.lock_keys(session, picked)
                            for pid, key in events:
                                relay.enqueue(session, "shop.event", {"id": pid}, ordering_key=key)
                            if rollback:
                                session.rollback()
                            else:
                                session.commit()
                        break
                    except sa_exc.DBAPIError as exc:
                        if not _is_deadlock(exc):
                            raise
                with lock:
                    for pid, key in events:
                        if rollback:
                            rolled_back.add(pid)
                        else:
                            committed[pid] = key
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=producer, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not errors, errors
    received = collector.drain(len(committed), timeout=120, settle=1.0)
    ids = {m.body["id"] for m in received}
    assert ids == set(committed), (len(ids), len(committed))
    assert not ids & rolled_back
    for key, seqs in _first_arrivals(received).items():
        assert seqs == list(range(1, len(seqs) + 1)), f"key {key} out of order or with a gap"
    # The numbers follow commit order: a key's row numbers ascend with the row ids.
    with any_engine.connect() as conn:
        result = conn.execute(
            sa.select(outbox.c.ordering_key, outbox.c.seq).order_by(outbox.c.id)
        ).all()
    last: dict[str, int] = defaultdict(int)
    for key, seq in result:
        assert seq == last[key] + 1, (key, seq, last[key])
        last[key] = seq
    fleet.assert_alive()


def test_a_poison_row_in_a_hot_key_run_holds_the_rest_until_retried(
    any_engine: sa.Engine, fleet: Fleet, collector: Collector, db_url: str
) -> None:
    """A hot key's run of 40 with an unsendable row at 20 (a header integer no AMQP field can
    carry): rows 1-19 arrive, the poison row is dead-lettered after its attempts, nothing after
    it arrives; an operator fixes the row and `relay failed retry` sends 20-40 in order."""
    with Session(any_engine) as session, session.begin():
        for n in range(1, 41):
            headers = {"big": 2**70} if n == 20 else None
            relay.enqueue(session, "hot.event", {"n": n}, ordering_key="hot", headers=headers)
    first = collector.drain(19, timeout=60)
    poison = sa.select(outbox.c.id, outbox.c.status).where(outbox.c.seq == 20)

    def buried() -> bool:
        with any_engine.connect() as conn:
            return bool(conn.execute(poison).one().status == "failed")

    wait_until(buried, timeout=60, what="the poison row to be dead-lettered")
    assert [m.body["n"] for m in collector.drain(19, timeout=1, settle=0.5)] == list(range(1, 20))
    with any_engine.begin() as conn:
        poison_id = conn.execute(poison).one().id
        conn.execute(sa.update(outbox).where(outbox.c.id == poison_id).values(headers=None))
    done = subprocess.run(
        [RELAY_BIN, "failed", "retry", "--all"],
        env=fleet.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    received = collector.drain(40, timeout=60, settle=0.5)
    assert first[:19] == received[:19]
    assert _first_arrivals(received)["hot"] == list(range(1, 41))
    fleet.assert_alive()
