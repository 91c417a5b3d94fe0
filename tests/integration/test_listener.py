"""The outbox trigger's NOTIFY and relay.dispatch.listener on real PostgreSQL: when it rings, when
it does not, and that it comes back after its session is killed."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from relay.dispatch.gate import Gate, Mode
from relay.dispatch.listener import Listener, Poller
from relay.exceptions import StoreError
from relay.store.dispatch import Store
from tests.support.env import wait_until

#: Notifications and reconnects against wall-clock bounds: run alone (see the Makefile).
pytestmark = [pytest.mark.serial, pytest.mark.timeout(60)]


class Bell:
    """Counts notifications; ``rung`` is set on each one. With ``drain``, each one also empties
    the outbox, as a relay would: the listener's gate then finds the outbox quiet again and asks
    writers to notify (migration 0011), instead of waking the relay for the rows left."""

    def __init__(self, drain: sa.Engine | None = None) -> None:
        self.count = 0
        self.rung = threading.Event()
        self.drain = drain

    def __call__(self) -> None:
        if self.drain is not None:
            with self.drain.begin() as conn:
                conn.execute(sa.text("DELETE FROM outbox"))
        self.count += 1
        self.rung.set()


def _named(url: str, name: str) -> str:
    return sa.make_url(url).update_query_dict({"application_name": name}).render_as_string(False)


@pytest.fixture
def pg_engine(pg_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    yield engine
    engine.dispose()


@pytest.fixture
def bell(pg_engine: sa.Engine) -> Bell:
    return Bell(drain=pg_engine)


@pytest.fixture
def listening(pg_url: str, bell: Bell) -> Iterator[Listener]:
    # The gate looks on sessions of its own: only the LISTEN session carries the name.
    gate = Gate(Store.from_url(pg_url), floor=0.025, settle_seconds=1.0)
    named = _named(pg_url, "relay-test-listener")
    listener = Listener(named, bell, heartbeat_seconds=0.5, gate=gate)
    listener.start()
    wait_until(listener.listening.is_set, 10, "the listener to LISTEN")
    wait_until(lambda: listener.gate.mode is Mode.LISTENING, 10, "the idle listener's flag")
    yield listener
    listener.stop()


def _insert(engine: sa.Engine, rows: int, *, commit: bool = True) -> None:
    values = ", ".join(f"('t.{i}', '{{}}')" for i in range(rows))
    with engine.connect() as conn:
        conn.execute(sa.text(f"INSERT INTO outbox (event_type, payload) VALUES {values}"))
        conn.execute(sa.text(f"INSERT INTO outbox (event_type, payload) VALUES {values}"))
        if commit:
            conn.commit()
        else:
            conn.rollback()


def test_a_committed_plain_sql_insert_rings_once_per_transaction(
    listening: Listener, bell: Bell, pg_engine: sa.Engine
) -> None:
    """Two multi-row INSERT statements in one transaction: one notification, at commit."""
    _insert(pg_engine, 50)
    assert bell.rung.wait(5)
    # Bounded wait for a second (wrong) notification: none may come.
    assert not _rings_again(bell, 0.5)
    assert bell.count == 1


def test_a_rolled_back_insert_rings_nothing(
    listening: Listener, bell: Bell, pg_engine: sa.Engine
) -> None:
    """A rolled-back insert notifies nothing; a later committed one still does."""
    _insert(pg_engine, 3, commit=False)
    assert not bell.rung.wait(0.5)
    _insert(pg_engine, 1)
    assert bell.rung.wait(5)
    assert bell.count == 1


def test_listener_reconnects_after_pg_terminate_backend_and_logs_it(
    listening: Listener, bell: Bell, pg_engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """Its session killed, the listener logs the loss, LISTENs again on a new session, rings
    once for what it may have missed, and passes on the next commit's notification."""
    caplog.set_level(logging.INFO, logger="relay.dispatch.listener")
    with pg_engine.connect() as conn:
        killed = conn.execute(
            sa.text(
                # Only this test's database: other runs' listeners share the server and the name.
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'relay-test-listener' AND datname = current_database()"
            )
        ).scalar()
    assert killed == 1
    wait_until(lambda: listening.sessions >= 2, 15, "the listener to reconnect")
    wait_until(listening.listening.is_set, 5, "the new session to LISTEN")
    assert bell.count == 1, "a reconnect rings once, for what was missed"
    bell.rung.clear()
    _insert(pg_engine, 1)
    wait_until(lambda: bell.count == 2, 15, "the notification after the reconnect")
    text = caplog.text
    assert "lost its connection" in text
    assert "listening on relay_outbox again" in text


def test_exclusive_listeners_take_turns(pg_url: str, pg_engine: sa.Engine) -> None:
    """Of two exclusive listeners on one database only one LISTENs; stop it and the other takes
    over (one listener per deployment, even with two beats)."""
    first_bell, second_bell = Bell(pg_engine), Bell(pg_engine)
    first = Listener(pg_url, first_bell, exclusive=True, heartbeat_seconds=0.2).start()
    wait_until(first.listening.is_set, 10, "the first listener")
    second = Listener(pg_url, second_bell, exclusive=True, heartbeat_seconds=0.2).start()
    try:
        _insert(pg_engine, 1)
        assert first_bell.rung.wait(5)
        assert not second.listening.is_set()
        assert second_bell.count == 0
        first.stop()
        wait_until(second.listening.is_set, 10, "the second listener to take over")
        _insert(pg_engine, 1)
        assert second_bell.rung.wait(5)
    finally:
        first.stop()
        second.stop()


def _rings_again(bell: Bell, within: float) -> bool:
    bell.rung.clear()
    return bell.rung.wait(within)


def test_poller_stops_with_an_error_when_its_look_cannot_succeed(
    pg_engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A non-retryable database error (the outbox table dropped) stops the poller with one
    ERROR log and keeps the error, instead of warning at every look for ever."""
    with pg_engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE outbox CASCADE"))
    found = Bell()
    poller = Poller(Store(pg_engine), found, floor=0.01, ceiling=0.02)
    with caplog.at_level(logging.WARNING, logger="relay.dispatch.listener"):
        poller.start()
        assert poller._thread is not None
        poller._thread.join(10)
        assert not poller._thread.is_alive()
    assert isinstance(poller.error, StoreError)
    assert not poller.error.retryable
    assert poller.looks == 1
    assert found.count == 0
    assert [r.levelno for r in caplog.records] == [logging.ERROR]
