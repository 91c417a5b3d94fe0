"""The PostgreSQL wake-up (relay.wakeup.watcher) on a real server: a writer's commit wakes the
relay however long its transaction stays open after the INSERT, with nothing run by the
writer for it; an idle outbox costs one statement a look; a killed session comes back; a role
that may not read the sequence hands over to polling. And the Poller of the other databases."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa

from relay.exceptions import StoreError
from relay.store.dispatch_path.store import DispatchStore
from relay.wakeup.watcher import Poller, SequenceWatcher
from tests.support.env import wait_until

#: Wake-ups against wall-clock bounds: run alone (see the Makefile).
pytestmark = [pytest.mark.serial, pytest.mark.timeout(60)]

INSERT = "INSERT INTO outbox (event_type, payload) VALUES ('w.t', '{}')"
FLOOR = 0.025


class Relay:
    """Stands in for the relay a watcher wakes: each wake-up takes every pending row (as a
    claim would) and notes when it saw each one."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.wakeups = 0
        self.seen: dict[int, float] = {}

    def __call__(self) -> None:
        self.wakeups += 1
        with self.engine.begin() as conn:
            ids = conn.execute(
                sa.text("UPDATE outbox SET status = 'sent' WHERE status = 'pending' RETURNING id")
            ).scalars()
            now = time.monotonic()
            self.seen.update((i, now) for i in ids)


@pytest.fixture
def relay(pg_engine: sa.Engine) -> Relay:
    return Relay(pg_engine)


def _named(url: str, name: str) -> str:
    return sa.make_url(url).update_query_dict({"application_name": name}).render_as_string(False)


@pytest.fixture
def watcher(pg_url: str, relay: Relay) -> Iterator[SequenceWatcher]:
    store = DispatchStore.from_url(_named(pg_url, "relay-test-watch"), pool_size=2)
    watching = SequenceWatcher(store, relay, FLOOR).start()
    wait_until(lambda: watching.looks >= 3, 10, "the watcher's first looks")
    yield watching
    watching.stop()


def _commit_one(engine: sa.Engine, *, hold: float = 0.0) -> tuple[int, float]:
    """One plain-SQL row; ``hold`` seconds between the INSERT and the commit. Returns its id
    and when the commit returned."""
    with engine.connect() as conn:
        new_id = conn.execute(sa.text(f"{INSERT} RETURNING id")).scalar_one()
        time.sleep(hold)
        conn.commit()
    return int(new_id), time.monotonic()


def _seen_after_commit(relay: Relay, new_id: int, committed: float) -> float:
    wait_until(lambda: new_id in relay.seen, 10, f"row {new_id} to be claimed")
    return relay.seen[new_id] - committed


def test_a_committed_plain_sql_insert_wakes_the_relay(
    watcher: SequenceWatcher, relay: Relay, pg_engine: sa.Engine
) -> None:
    """A row committed by plain SQL is claimed within a few looks of its commit; no tick runs
    here, so without the wake-up it would never be claimed."""
    new_id, committed = _commit_one(pg_engine)
    assert _seen_after_commit(relay, new_id, committed) < 0.5


def test_a_writer_that_commits_long_after_its_insert_is_claimed_when_it_commits(
    watcher: SequenceWatcher, relay: Relay, pg_engine: sa.Engine
) -> None:
    """The sequence moves at the INSERT, 0.5 s before the commit, and never again: the watcher
    keeps looking for rows until that writer's transaction has ended, so the row is claimed
    right after its commit, not at the tick."""
    new_id, committed = _commit_one(pg_engine, hold=0.5)
    assert 0 <= _seen_after_commit(relay, new_id, committed) < 0.5
    assert watcher.probes >= 5, "it looked for rows while the writer's transaction was open"


def test_an_unrelated_long_transaction_does_not_hold_the_wake_up_back(
    watcher: SequenceWatcher, relay: Relay, pg_engine: sa.Engine
) -> None:
    """A transaction that holds the horizon back (a report, a session idle in transaction)
    begins before the writer and outlives it: the writer's row is still claimed right after
    its commit, by the looks for rows the watcher keeps up while the horizon is held."""
    with pg_engine.connect() as report:
        report.execute(sa.text("SELECT pg_current_xact_id()"))  # holds xmin from now on
        new_id, committed = _commit_one(pg_engine, hold=0.3)
        assert 0 <= _seen_after_commit(relay, new_id, committed) < 0.5
        probes = watcher.probes
        time.sleep(0.3)
        assert watcher.probes > probes, "it keeps looking while the horizon is held"
        report.rollback()
    # Once the report ended, the watcher rests again.
    wait_until(lambda: watcher.rule.horizon is None, 5, "the horizon to pass")
    probes, wakeups = watcher.probes, relay.wakeups
    time.sleep(0.3)
    assert (watcher.probes, relay.wakeups) == (probes, wakeups)


def test_a_rolled_back_insert_wakes_nothing(
    watcher: SequenceWatcher, relay: Relay, pg_engine: sa.Engine
) -> None:
    """A rolled-back insert moved the sequence but left no row: the look for rows finds none
    and the relay is not woken (in a Celery fleet, no task is sent for it)."""
    wait_until(lambda: watcher.rule.horizon is None, 5, "the first horizon to pass")
    probes, wakeups = watcher.probes, relay.wakeups
    with pg_engine.connect() as conn:
        conn.execute(sa.text(INSERT))
        conn.rollback()
    wait_until(lambda: watcher.probes > probes, 5, "a look for rows after the move")
    wait_until(lambda: watcher.rule.horizon is None, 5, "the horizon to pass")
    assert relay.wakeups == wakeups


def test_an_idle_outbox_costs_one_statement_a_look_and_wakes_nothing(
    watcher: SequenceWatcher, relay: Relay
) -> None:
    """Idle, each look is one statement that reads no table, and nothing is woken."""
    wait_until(lambda: watcher.rule.horizon is None, 5, "the first horizon to pass")
    looks, probes, wakeups = watcher.looks, watcher.probes, relay.wakeups
    time.sleep(0.5)
    assert watcher.looks - looks >= 0.5 / FLOOR / 2
    assert (watcher.probes, relay.wakeups) == (probes, wakeups)


def test_no_writer_notifies_and_only_the_numbering_trigger_remains(
    pg_url: str, pg_engine: sa.Engine
) -> None:
    """Since migration 0014 a writer's commit sends no NOTIFY (which PostgreSQL serialises)
    and runs no trigger but the keyed-numbering one, whose WHEN skips unkeyed rows."""
    info = sa.make_url(pg_url).set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(info, autocommit=True) as spy:
        spy.execute("LISTEN relay_outbox")
        for _ in range(3):
            _commit_one(pg_engine)
        assert list(spy.notifies(timeout=0.5)) == []
    with pg_engine.connect() as conn:
        triggers = conn.execute(
            sa.text(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'outbox'::regclass "
                "AND NOT tgisinternal"
            )
        ).scalars()
        assert list(triggers) == ["relay_outbox_seq"]


def test_the_watcher_comes_back_after_its_session_is_killed(
    watcher: SequenceWatcher,
    relay: Relay,
    pg_engine: sa.Engine,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its session terminated, the watcher logs the loss once, connects again, and the next
    commit still wakes the relay."""
    caplog.set_level(logging.INFO, logger="relay.wakeup.watcher")
    with pg_engine.connect() as conn:
        killed = conn.execute(
            sa.text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'relay-test-watch' AND datname = current_database()"
            )
        ).scalar()
    assert killed >= 1
    wait_until(lambda: "reached the database again" in caplog.text, 15, "the watcher's return")
    assert "relay wake-up lost the database" in caplog.text
    new_id, committed = _commit_one(pg_engine)
    assert _seen_after_commit(relay, new_id, committed) < 0.5


def test_a_role_that_may_not_read_the_sequence_hands_over_to_polling(
    pg_url: str, pg_engine: sa.Engine, relay: Relay, caplog: pytest.LogCaptureFixture
) -> None:
    """A relay role without SELECT on outbox_id_seq cannot watch: one ERROR naming the GRANT,
    the error kept, and ``on_unwatchable`` called so that the runner polls instead."""
    role = f"relay_nowatch_{uuid.uuid4().hex[:8]}"
    with pg_engine.begin() as conn:
        conn.execute(sa.text(f"CREATE ROLE {role} LOGIN"))
        conn.execute(sa.text(f"GRANT SELECT, UPDATE ON outbox TO {role}"))
    handed_over = threading.Event()
    url = sa.make_url(pg_url).set(username=role).render_as_string(False)
    watching = SequenceWatcher(
        DispatchStore.from_url(url), relay, FLOOR, on_unwatchable=handed_over.set
    )
    try:
        with caplog.at_level(logging.WARNING, logger="relay.wakeup.watcher"):
            watching.start()
            assert handed_over.wait(10)
        assert isinstance(watching.error, StoreError)
        assert "GRANT SELECT ON SEQUENCE public.outbox_id_seq" in caplog.text
        assert [r.levelno for r in caplog.records] == [logging.ERROR]
    finally:
        watching.stop()
        with pg_engine.begin() as conn:
            conn.execute(sa.text(f"DROP OWNED BY {role}"))
            conn.execute(sa.text(f"DROP ROLE {role}"))


def test_poller_stops_with_an_error_when_its_look_cannot_succeed(
    pg_engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A non-retryable database error (the outbox table dropped) stops the poller with one
    ERROR log and keeps the error, instead of warning at every look for ever."""
    with pg_engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE outbox CASCADE"))
    found = threading.Event()
    poller = Poller(DispatchStore(pg_engine), found.set, floor=0.01, ceiling=0.02)
    with caplog.at_level(logging.WARNING, logger="relay.wakeup.watcher"):
        poller.start()
        assert poller._thread is not None
        poller._thread.join(10)
        assert not poller._thread.is_alive()
    assert isinstance(poller.error, StoreError)
    assert not poller.error.retryable
    assert poller.looks == 1
    assert not found.is_set()
    assert [r.levelno for r in caplog.records] == [logging.ERROR]


def test_a_wake_up_that_raises_is_logged_once_and_the_watcher_goes_on(
    pg_url: str, pg_engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """An ``on_wake`` that raises (a bug in a caller) is logged once, not at every look, and
    does not end the watcher: the next commit still reaches ``on_wake``."""
    calls: list[float] = []

    def on_wake() -> None:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RuntimeError("a caller's bug")

    watching = SequenceWatcher(DispatchStore.from_url(pg_url, pool_size=2), on_wake, FLOOR)
    with caplog.at_level(logging.WARNING, logger="relay.wakeup.watcher"):
        watching.start()
        try:
            wait_until(lambda: watching.looks >= 3, 10, "the first looks")
            _commit_one(pg_engine)
            wait_until(lambda: len(calls) == 1, 10, "the first wake-up")
            _commit_one(pg_engine)
            wait_until(lambda: len(calls) >= 2, 10, "a wake-up after the failed one")
        finally:
            watching.stop()
    failures = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(failures) == 1
    assert "failed a look" in failures[0].getMessage()
