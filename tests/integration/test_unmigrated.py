"""A relay pointed at a database that `relay migrate` has not made yet says so.

Before, Celery beat's poller on the embedded default (SQLite) warned "database unavailable: no
such table: relay_pauses" at every look, five times a second, naming neither the cause nor the
fix; on PostgreSQL and MariaDB the error did not name the fix either.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from relay.exceptions import DatabaseUnavailable, StoreError
from relay.store.dispatch_path.store import DispatchStore
from relay.store.schema import upgrade
from relay.wakeup.watcher import Poller
from tests.support import databases
from tests.support.env import wait_until
from tests.support.rows import enqueue_many

HINT = "has `relay migrate` run on this database?"


@pytest.fixture
def sqlite_empty_url(backend_pool: databases.BackendPool) -> Iterator[str]:
    """The embedded default's kind of database, with no outbox schema yet."""
    with backend_pool.database("sqlite", migrated=False) as url:
        yield url


def test_a_look_at_a_database_without_the_relays_tables_names_the_fix(empty_url: str) -> None:
    """On SQLite the error is the connection's kind (retryable): the tables may appear, as
    they do when `relay migrate` runs after beat started."""
    store = DispatchStore.from_url(empty_url)
    try:
        with pytest.raises(StoreError) as caught:
            store.backlog(1, expired=False)
    finally:
        store.dispose()
    assert HINT in str(caught.value), caught.value
    if empty_url.startswith("sqlite"):
        assert isinstance(caught.value, DatabaseUnavailable)
        assert caught.value.retryable


def test_the_poller_warns_once_until_the_tables_are_made_then_finds_rows(
    sqlite_empty_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Beat's poller on the embedded default before `relay migrate`: one warning naming the fix
    however many looks fail, then, once migrated, one line saying it looks again, and the rows
    committed are found."""
    store = DispatchStore.from_url(sqlite_empty_url)
    found = threading.Event()
    poller = Poller(store, found.set, floor=0.01, ceiling=0.02)
    with caplog.at_level(logging.INFO, logger="relay.wakeup.watcher"):
        poller.start()
        try:
            wait_until(lambda: poller.looks >= 20, 10, "twenty failed looks")
            upgrade.upgrade(sqlite_empty_url)
            engine = store.engine
            enqueue_many(engine, 1)
            assert found.wait(10), "the poller never found the row committed after migrating"
        finally:
            poller.stop()
            store.dispose()
    assert poller.error is None
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    warned = [m for level, m in lines if level == logging.WARNING]
    assert len(warned) == 1, lines
    assert HINT in warned[0], warned
    assert "no such table" in warned[0], warned
    assert (logging.INFO, "relay poller looking for new rows again") in lines, lines
