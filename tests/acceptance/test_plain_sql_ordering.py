"""Per-key commit order for every writer (migration 0012), on every database: producer threads
through ``relay.enqueue`` and one raw DBAPI writer inserting three columns interleave keyed
events, some transactions rolled back, while two ``relay dispatch --loop`` run; per key the
consumer receives exactly the committed events, numbered without a gap, in commit order."""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

import relay
from relay.store.engine import create_engine
from tests.support.broker import Collector, Received
from tests.support.env import wait_until
from tests.support.fleet import Fleet, fleet_env

pytestmark = pytest.mark.timeout(240)

KEYS = [f"account-{i}" for i in range(5)]
#: Transactions per writer; every fifth is rolled back.
TRANSACTIONS = 30


@dataclass(frozen=True)
class Txn:
    """One committed transaction: its events by key, and the clock around its commit."""

    tags: tuple[str, ...]
    key: str
    before_commit: float
    after_commit: float


@pytest.fixture
def any_engine(db_url: str) -> Iterator[sa.Engine]:
    """An engine on a fresh database of each enabled kind."""
    eng = create_engine(db_url)
    yield eng
    eng.dispose()


@pytest.fixture
def fleet(
    db_url: str, amqp_url: str, exchange_name: str, tmp_path: Path, collector: Collector
) -> Iterator[Fleet]:
    """Two relay processes on the test's database (the collector's queue is bound first)."""
    relays = Fleet(fleet_env(db_url, amqp_url, exchange_name), tmp_path)
    workers = relays.start(2)
    # Both relay, and a short run must not stop one still starting (its exit is then a signal's).
    wait_until(lambda: all("starting" in w.log() for w in workers), 60, "both relays to start")
    yield relays
    codes = relays.stop()
    assert all(code == 0 for code in codes.values()), relays.logs()


def _retryable(exc: sa_exc.DBAPIError | Exception) -> bool:
    """A deadlock victim (InnoDB, racing first inserts of a key) or a busy SQLite: the
    database rolled the transaction back, as the test's own rollbacks do."""
    text = str(exc).lower()
    return "deadlock" in text or "database is locked" in text


def _relay_writer(
    engine: sa.Engine, name: str, out: list[Txn], errors: list[BaseException]
) -> None:
    """Transactions of 1-3 events of one key through relay.enqueue; every fifth rolled back."""
    rng = random.Random(name)
    try:
        for t in range(TRANSACTIONS):
            key = rng.choice(KEYS)
            tags = tuple(f"{name}/{t}/{i}" for i in range(rng.randint(1, 3)))
            conn = engine.connect()
            try:
                trans = conn.begin()
                for tag in tags:
                    relay.enqueue(conn, "plain.order", {"tag": tag}, ordering_key=key)
                if t % 5 == 4:
                    trans.rollback()
                    continue
                before = time.monotonic()
                trans.commit()
                out.append(Txn(tags, key, before, time.monotonic()))
            except sa_exc.DBAPIError as exc:
                if not _retryable(exc):
                    raise
            finally:
                conn.close()
    except BaseException as exc:
        errors.append(exc)


def _dbapi_connection(engine: sa.Engine) -> Any:
    """A DBAPI connection in the driver's own transaction mode (the relay's SQLite engine
    puts pysqlite in autocommit to issue its own BEGIN: a plain client does not)."""
    if engine.dialect.name == "sqlite":
        return sqlite3.connect(str(engine.url.database), timeout=30)
    return engine.raw_connection()


def _raw_writer(engine: sa.Engine, out: list[Txn], errors: list[BaseException]) -> None:
    """A writer that knows nothing of the relay: a DBAPI cursor, a three-column INSERT."""
    rng = random.Random("raw")
    mark = "?" if engine.dialect.paramstyle == "qmark" else "%s"
    sql = f"INSERT INTO outbox (event_type, payload, ordering_key) VALUES ({mark}, {mark}, {mark})"
    try:
        for t in range(TRANSACTIONS):
            key, tag = rng.choice(KEYS), f"raw/{t}/0"
            raw = _dbapi_connection(engine)
            try:
                cursor = raw.cursor()
                cursor.execute(sql, ("plain.order", json.dumps({"tag": tag}), key))
                cursor.close()
                if t % 5 == 2:
                    raw.rollback()
                    continue
                before = time.monotonic()
                raw.commit()
                out.append(Txn((tag,), key, before, time.monotonic()))
            except Exception as exc:
                if not _retryable(exc):
                    raise
                raw.rollback()
            finally:
                raw.close()
    except BaseException as exc:
        errors.append(exc)


def _applied(received: list[Received]) -> dict[str, int]:
    """Each applied tag's number, by the consumer rule of docs/ordering.md: a key's message is
    applied only when it is the next number; a duplicate, or an early copy published ahead of
    a row given back, is skipped (its number comes again)."""
    applied: dict[str, list[str]] = defaultdict(list)
    for m in received:
        key, seq = m.headers["ordering_key"], int(m.headers["ordering_seq"])
        if seq == len(applied[key]) + 1:
            applied[key].append(m.body["tag"])
    return {tag: i + 1 for tags in applied.values() for i, tag in enumerate(tags)}


def test_every_writer_is_delivered_in_commit_order_per_key_with_no_gap(
    any_engine: sa.Engine, fleet: Fleet, collector: Collector
) -> None:
    """4 relay.enqueue threads and a raw 3-column INSERT writer, 30 transactions each, 5 keys:
    each key's consumer sees exactly its committed events, ordering_seq 1..n, and of two
    transactions where one's commit returned before the other's began, the first one's
    events come first."""
    committed: list[Txn] = []
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_relay_writer, args=(any_engine, f"w{i}", committed, errors))
        for i in range(4)
    ]
    threads.append(threading.Thread(target=_raw_writer, args=(any_engine, committed, errors)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    expected = sum(len(t.tags) for t in committed)
    received = collector.drain(expected, timeout=60)
    position = _applied(received)
    while len(position) < expected:  # a duplicate or an early copy arrived instead of one
        before = len(received)
        received = collector.drain(before + 1, timeout=30)
        assert len(received) > before, f"{expected} committed, {len(position)} applied in order"
        position = _applied(received)
    assert len(position) == expected, f"{expected} committed, {len(position)} applied in order"
    assert sorted(position) == sorted(tag for t in committed for tag in t.tags)
    assert any(t.tags[0].startswith("raw/") for t in committed)

    for key in KEYS:
        txns = sorted((t for t in committed if t.key == key), key=lambda t: t.after_commit)
        for i, first in enumerate(txns):
            for later in txns[i + 1 :]:
                if first.after_commit < later.before_commit:
                    assert max(position[g] for g in first.tags) < min(
                        position[g] for g in later.tags
                    ), f"{key}: {first} was overtaken by {later}"
        for txn in txns:  # one transaction's events are consecutive numbers
            numbers = [position[g] for g in txn.tags]
            assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
