"""The wake-up flag (migration 0011) on real PostgreSQL: a writer's commit NOTIFYs while the
relay listens idle and not while it is busy, and a writer that read the flag off just before it
went on is still found without waiting for the tick."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from relay.dispatch.gate import Gate, Mode
from relay.dispatch.listener import CHANNEL, PROBE_PREFIX, Listener, conninfo
from relay.store.dispatch import Store
from tests.support.env import wait_until

FLAG = "SELECT pg_sequence_last_value('relay_wakeup')"
pytestmark = [pytest.mark.serial, pytest.mark.timeout(60)]

INSERT = "INSERT INTO outbox (event_type, payload) VALUES ('w.t', '{}')"


class Spy:
    """A second LISTEN session on the trigger's channel: counts what writers really notify
    (not the listeners' own probes)."""

    def __init__(self, url: str) -> None:
        self.count = 0
        self._conn: Any = psycopg.connect(conninfo(url), autocommit=True)
        self._conn.execute(f"LISTEN {CHANNEL}")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for note in self._conn.notifies(timeout=0.05):
                # A listener's self-check at the start of a session is not a writer's NOTIFY.
                if not note.payload.startswith(PROBE_PREFIX):
                    self.count += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self._conn.close()


class Relay:
    """Stands in for the relay the listener wakes: counts wake-ups; ``draining`` empties the
    outbox on each (an idle relay again), otherwise the rows stay (a busy one)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine, self.draining, self.wakeups = engine, True, 0
        self.woken = threading.Event()

    def __call__(self) -> None:
        if self.draining:
            with self.engine.begin() as conn:
                conn.execute(sa.text("DELETE FROM outbox"))
        self.wakeups += 1
        self.woken.set()


@pytest.fixture
def pg_engine(pg_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    yield engine
    engine.dispose()


@pytest.fixture
def spy(pg_url: str) -> Iterator[Spy]:
    s = Spy(pg_url)
    yield s
    s.close()


@pytest.fixture
def relay(pg_engine: sa.Engine) -> Relay:
    return Relay(pg_engine)


@pytest.fixture
def listener(pg_url: str, relay: Relay) -> Iterator[Listener]:
    gate = Gate(Store.from_url(pg_url), floor=0.025, settle_seconds=5.0)
    running = Listener(pg_url, relay, gate=gate).start()
    yield running
    running.stop()


def _flag(engine: sa.Engine) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(sa.text(FLAG)).scalar_one() == 1)


def _commit_one(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(INSERT))


def test_a_writer_notifies_while_the_relay_is_idle_and_not_while_it_is_busy(
    listener: Listener, relay: Relay, spy: Spy, pg_engine: sa.Engine
) -> None:
    """Idle (flag on): one commit notifies and wakes the relay. Busy (rows left unclaimed):
    fifty commits notify nothing, yet the relay keeps being woken by the gate's looks."""
    wait_until(lambda: listener.gate.mode is Mode.LISTENING, 10, "the idle listener")
    assert _flag(pg_engine)
    _commit_one(pg_engine)
    wait_until(lambda: spy.count == 1, 5, "the idle relay's notification")
    wait_until(lambda: relay.wakeups >= 1, 5, "the wake-up")
    wait_until(lambda: listener.gate.mode is Mode.LISTENING, 10, "idle again after the drain")

    relay.draining = False
    _commit_one(pg_engine)  # wakes it; the row stays, so the relay is busy from now on
    wait_until(lambda: not _flag(pg_engine), 5, "the woken listener to turn the flag off")
    notified, woken = spy.count, relay.wakeups
    for _ in range(50):
        _commit_one(pg_engine)
    wait_until(lambda: relay.wakeups >= woken + 3, 5, "the gate's looks to wake the relay")
    assert spy.count == notified, "a busy relay's writers must not NOTIFY"
    assert not _flag(pg_engine)


def test_a_writer_that_read_the_flag_off_is_found_when_it_commits_after_the_flag_went_on(
    pg_url: str, relay: Relay, spy: Spy, pg_engine: sa.Engine
) -> None:
    """A transaction inserts while the flag is off and commits after it went on (no NOTIFY):
    the gate keeps looking until that transaction ends, so its row wakes the relay at once,
    not at the tick."""
    # 40 quiet looks (1 s) before the flag goes on: time for the writer to insert first.
    gate = Gate(Store.from_url(pg_url), floor=0.025, settle_seconds=5.0, quiet_looks=40)
    listener = Listener(pg_url, relay, gate=gate).start()
    try:
        wait_until(lambda: gate.mode is Mode.LISTENING, 10, "the idle listener")
        with pg_engine.connect() as writer:
            writer.execute(sa.text(f"SELECT pg_notify('{CHANNEL}', '')"))  # wakes the relay
            writer.commit()
            wait_until(lambda: not _flag(pg_engine), 5, "the woken listener's flag off")
            notified = spy.count
            writer.execute(sa.text(INSERT))  # reads the flag off: will not notify
            assert writer.execute(sa.text(FLAG)).scalar() == 0
            wait_until(lambda: _flag(pg_engine), 10, "the quiet listener's flag on")
            assert gate.mode is Mode.SETTLING, "an open writer keeps the gate looking"
            relay.woken.clear()
            before = relay.wakeups
            writer.commit()
        assert relay.woken.wait(3), "the late writer's row was not found (left for the tick)"
        assert relay.wakeups == before + 1
        assert spy.count == notified, "the late writer notified nothing: a look found it"
        wait_until(lambda: gate.mode is Mode.LISTENING, 10, "idle again")
    finally:
        listener.stop()


def test_a_stopping_listener_turns_the_flag_off_and_rings_the_others(
    pg_url: str, pg_engine: sa.Engine, spy: Spy
) -> None:
    """A listener that stops leaves writers no NOTIFY to pay for, and rings once so another
    listener still running looks and turns the flag on again."""
    first_relay, second_relay = Relay(pg_engine), Relay(pg_engine)
    first = Listener(pg_url, first_relay, gate=Gate(Store.from_url(pg_url), 0.025, 5.0)).start()
    second = Listener(pg_url, second_relay, gate=Gate(Store.from_url(pg_url), 0.025, 5.0))
    second.start()
    try:
        for one in (first, second):
            wait_until(lambda one=one: one.gate.mode is Mode.LISTENING, 10, "idle listeners")
        first.stop()
        wait_until(lambda: spy.count >= 1, 5, "the stopping listener's ring")
        rearmed = lambda: second.gate.rests >= 2 and second.gate.mode is Mode.LISTENING  # noqa: E731
        wait_until(rearmed, 10, "the other listener to look and re-arm")
        assert _flag(pg_engine)
        second.stop()
        assert not _flag(pg_engine)
    finally:
        first.stop()
        second.stop()


def test_a_role_that_may_only_insert_into_outbox_still_inserts(pg_engine: sa.Engine) -> None:
    """The trigger's WHEN reads the flag as the writer: a role granted only INSERT on outbox
    (and its id sequence) is not refused for want of a privilege on the flag."""
    role = f"relay_writer_{uuid.uuid4().hex[:8]}"
    with pg_engine.begin() as conn:
        conn.execute(sa.text(f"CREATE ROLE {role}"))
        conn.execute(sa.text(f"GRANT INSERT ON outbox TO {role}"))
        conn.execute(sa.text(f"GRANT USAGE ON SEQUENCE outbox_id_seq TO {role}"))
    try:
        for flag in (0, 1):
            with pg_engine.begin() as conn:
                conn.execute(sa.text(f"SELECT setval('relay_wakeup', {flag})"))
                conn.execute(sa.text(f"SET LOCAL ROLE {role}"))
                conn.execute(sa.text(INSERT))
        with pg_engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM outbox")).scalar_one() == 2
    finally:
        with pg_engine.begin() as conn:
            conn.execute(sa.text(f"DROP OWNED BY {role}"))
            conn.execute(sa.text(f"DROP ROLE {role}"))
