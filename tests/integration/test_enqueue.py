"""relay.enqueue writes in the caller's transaction and refuses bad events before writing."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.exceptions import EventError
from relay.produce.enqueue import Producer
from relay.store import dialects
from relay.store.dispatch_path.store import DispatchStore
from relay.store.schema.tables import outbox
from tests.support.rows import rows


def test_commit_writes_a_pending_row_with_defaults(engine: sa.Engine) -> None:
    """A committed enqueue leaves one pending row with attempt 0 and DB timestamps."""
    with Session(engine) as session, session.begin():
        row_id = relay.enqueue(
            session, "order.created", {"id": 7}, headers={"tenant": "acme"}, ordering_key="o-7"
        )
    row = rows(engine, row_id)[row_id]
    assert (row["status"], row["attempt"], row["payload"], row["headers"], row["ordering_key"]) == (
        "pending",
        0,
        {"id": 7},
        {"tenant": "acme"},
        "o-7",
    )
    assert row["created_at"] is not None
    assert row["next_retry_at"] is None


def test_rollback_leaves_no_event(engine: sa.Engine) -> None:
    """The event shares the business transaction's fate."""
    with Session(engine) as session:
        session.begin()
        relay.enqueue(session, "order.created", {"id": 1})
        session.rollback()
    assert rows(engine) == {}


def test_enqueue_works_on_a_core_connection(engine: sa.Engine) -> None:
    """A SQLAlchemy Connection inside a transaction is accepted like a Session."""
    with engine.begin() as conn:
        row_id = relay.enqueue(conn, "x.y", [1, 2, 3])
    assert rows(engine, row_id)[row_id]["payload"] == [1, 2, 3]


def test_connection_without_transaction_is_refused(engine: sa.Engine) -> None:
    """Outside a transaction there is nothing to be atomic with: refuse, write nothing."""
    with engine.connect() as conn, pytest.raises(EventError, match="session_or_connection"):
        relay.enqueue(conn, "x.y", {})
    assert rows(engine) == {}


def test_delay_is_counted_from_database_time(engine: sa.Engine) -> None:
    """delay sets next_retry_at = DB now + delay, and the row is not claimable before it."""
    with Session(engine) as session, session.begin():
        row_id = relay.enqueue(session, "later", {}, delay=timedelta(minutes=5))
        clock = dialects.for_name(engine.dialect.name)
        now = session.execute(sa.select(clock.now())).scalar_one()
    row = rows(engine, row_id)[row_id]
    assert 299 <= (row["next_retry_at"] - now).total_seconds() <= 301
    assert DispatchStore(engine).claim("w", 10, lease_seconds=30) == []


def test_row_inserted_by_plain_sql_is_valid_and_claimable(engine: sa.Engine) -> None:
    """Any language may write the outbox: event_type and payload alone make a valid row."""
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO outbox (event_type, payload) VALUES ('plain.sql', '{\"a\": 1}')")
        )
    (event,) = DispatchStore(engine).claim("w", 10, lease_seconds=30)
    assert (event.event_type, event.payload, event.attempt) == ("plain.sql", {"a": 1}, 1)


BAD_EVENTS: list[tuple[str, dict[str, Any], str]] = [
    ("empty event_type", {"event_type": ""}, "event_type"),
    ("event_type not str", {"event_type": 42}, "event_type"),
    ("event_type over 255 bytes", {"event_type": "é" * 128}, "event_type"),
    ("event_type with NUL", {"event_type": "a\x00b"}, "event_type"),
    ("payload not JSON", {"payload": {"when": object()}}, "payload"),
    ("payload NaN", {"payload": {"x": math.nan}}, "payload"),
    ("payload Infinity", {"payload": [math.inf]}, "payload"),
    ("payload set", {"payload": {1, 2}}, "payload"),
    ("payload over the cap", {"payload": "x" * 2000}, "payload"),
    ("headers not a mapping", {"headers": ["a"]}, "headers"),
    ("headers not JSON", {"headers": {"a": b"bytes"}}, "headers"),
    ("headers NaN", {"headers": {"a": math.nan}}, "headers"),
    ("headers non-str key", {"headers": {1: "a"}}, "headers"),
    ("headers reserved key", {"headers": {"outbox_id": 1}}, "headers"),
    ("headers key over 255 bytes", {"headers": {"k" * 256: 1}}, "headers"),
    ("ordering_key empty", {"ordering_key": ""}, "ordering_key"),
    ("ordering_key not str", {"ordering_key": 5}, "ordering_key"),
    ("negative delay", {"delay": -1}, "delay"),
    ("negative timedelta", {"delay": timedelta(seconds=-1)}, "delay"),
    ("NaN delay", {"delay": math.nan}, "delay"),
    ("delay wrong type", {"delay": "5s"}, "delay"),
]


@pytest.mark.parametrize(("case", "override", "field"), BAD_EVENTS, ids=[c[0] for c in BAD_EVENTS])
def test_bad_event_is_refused_naming_the_field_and_nothing_is_written(
    engine: sa.Engine, case: str, override: dict[str, Any], field: str
) -> None:
    """Each bad input raises EventError naming its field inside the transaction; no row lands."""
    producer = Producer(max_payload_bytes=1000)
    kwargs: dict[str, Any] = {"event_type": "ok.type", "payload": {"ok": True}, **override}
    with Session(engine) as session, session.begin():
        with pytest.raises(EventError) as info:
            producer.enqueue(session, **kwargs)
        assert info.value.field == field
        assert field in str(info.value)
        producer.enqueue(session, "still.usable", {})
    assert [r["event_type"] for r in rows(engine).values()] == ["still.usable"]


def test_wrong_target_type_is_refused() -> None:
    """Passing something that is not a Session or Connection names the argument."""
    with pytest.raises(EventError, match="session_or_connection"):
        relay.enqueue("not a session", "t", {})  # type: ignore[arg-type]


def test_wake_fires_once_per_committed_transaction(engine: sa.Engine) -> None:
    """The after-commit wake-up runs once per transaction, never after a rollback."""
    wakes: list[int] = []
    producer = Producer(wake=lambda: wakes.append(1))
    with Session(engine) as session:
        with session.begin():
            for i in range(5):
                producer.enqueue(session, "t", {"i": i})
        assert wakes == [1]
        session.begin()
        producer.enqueue(session, "t", {})
        session.rollback()
        assert wakes == [1]
        with session.begin():
            producer.enqueue(session, "t", {})
    assert wakes == [1, 1]
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(outbox)).scalar() == 6


def test_payload_cap_comes_from_the_environment(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELAY_MAX_PAYLOAD_BYTES sets relay.enqueue's cap; over it the event is refused."""
    from relay.produce import enqueue as producer_face

    monkeypatch.setenv("RELAY_MAX_PAYLOAD_BYTES", "64")
    monkeypatch.setattr(producer_face, "_default", None)
    with Session(engine) as session, session.begin():
        relay.enqueue(session, "small", {"x": "y" * 10})
        with pytest.raises(EventError, match="over the cap of 64"):
            relay.enqueue(session, "big", {"x": "y" * 100})
    assert [r["event_type"] for r in rows(engine).values()] == ["small"]


class _VisibleWakes:
    """A wake-up that records, at the moment it runs, how many rows another connection sees:
    a wake that ran before the commit landed would see fewer than were committed."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.seen: list[int] = []
        self.done = threading.Condition()

    def __call__(self) -> None:
        with self.engine.connect() as other:
            count = other.execute(sa.select(sa.func.count()).select_from(outbox)).scalar_one()
        with self.done:
            self.seen.append(count)
            self.done.notify_all()

    def wait_for(self, n: int) -> list[int]:
        """The counts of the first ``n`` wake-ups (Core's run on a helper thread)."""
        with self.done:
            assert self.done.wait_for(lambda: len(self.seen) >= n, timeout=10), self.seen
        return self.seen[:n]


def _five_ways(engine: sa.Engine, producer: Producer, settled: Callable[[], None]) -> None:
    """Five committed transactions, one per way of calling enqueue, each writing two events;
    ``settled`` runs after each."""
    with Session(engine) as session, session.begin():  # an ORM Session
        producer.enqueue(session, "t", {})
        producer.enqueue(session, "t", {})
    settled()
    with engine.begin() as conn:  # engine.begin(): a new Connection on a pooled connection
        producer.enqueue(conn, "t", {})
        producer.enqueue(conn, "t", {})
    settled()
    with engine.connect() as conn:  # one Connection, reused for two transactions
        for _ in range(2):
            with conn.begin():
                producer.enqueue(conn, "t", {})
                producer.enqueue(conn, "t", {})
            settled()
    with engine.connect() as conn, conn.begin():  # events written inside a savepoint
        with conn.begin_nested():
            producer.enqueue(conn, "t", {})
        producer.enqueue(conn, "t", {})
    settled()


def test_wake_fires_once_per_commit_for_every_way_of_calling_enqueue(engine: sa.Engine) -> None:
    """Session, engine.begin(), a reused Connection and a savepoint: each committed transaction
    wakes the relay once, and only after its rows are visible to other connections; Connection
    objects on the same pooled connection (the old flag lived in its shared info) all wake."""
    wakes = _VisibleWakes(engine)
    producer = Producer(wake=wakes)
    commits = 0

    def settled() -> None:
        nonlocal commits
        commits += 1
        wakes.wait_for(commits)

    for _ in range(3):  # the same pooled DBAPI connections again and again
        _five_ways(engine, producer, settled)
    # Each wake-up saw its own transaction's two rows committed, and no wake-up ran twice.
    assert wakes.seen == [2 * (n + 1) for n in range(15)]


def test_rolled_back_core_transactions_wake_nothing(engine: sa.Engine) -> None:
    """A Core transaction that rolls back, whole, leaves no wake-up pending for the next one."""
    wakes = _VisibleWakes(engine)
    producer = Producer(wake=wakes)
    with engine.connect() as conn:
        with conn.begin() as tx:
            producer.enqueue(conn, "t", {})
            tx.rollback()
        with conn.begin():
            conn.execute(sa.select(1))  # commits without any event
        with conn.begin():
            producer.enqueue(conn, "t", {})
    assert wakes.wait_for(1) == [1]
    time.sleep(0.1)
    assert wakes.seen == [1]
