"""The database's connection faults (issue 38): deadlines on every connection, a server that
will not take writes taken for a connection fault, and calls abandoned past their deadline."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from relay.config import timing
from relay.exceptions import DatabaseUnavailable
from relay.store.dispatch_path.raw_reader import RawReader
from relay.store.dispatch_path.serverstats import ServerStats
from relay.store.dispatch_path.store import DispatchStore
from relay.store.engine import create_engine, ping
from tests.support.proxy import TcpProxy
from tools.pgserver import free_port

#: A 3 s lease: calls abandoned after 1 s, connections given 2 s.
LEASE = 3.0
DEADLINES = timing.database_deadlines(LEASE)
#: Far above any deadline here, far below a hang.
BOUND = 15.0


@pytest.fixture
def proxy(db_url: str) -> Iterator[TcpProxy]:
    """A fault proxy in front of the test's database server (not SQLite's file)."""
    url = sa.make_url(db_url)
    if url.get_backend_name() == "sqlite":
        pytest.skip("SQLite has no connection to freeze")
    proxy = TcpProxy((url.host or "127.0.0.1", url.port or 0))
    yield proxy
    proxy.close()


def _store(url: str, **engine_kwargs: object) -> DispatchStore:
    return DispatchStore.from_url(url, deadlines=DEADLINES, abandon_calls=True, **engine_kwargs)


def test_postgresql_connections_carry_deadlines_but_keep_the_urls_own(pg_url: str) -> None:
    """connect_timeout, keepalives and tcp_user_timeout from the lease; a URL's value wins."""
    url = sa.make_url(pg_url).update_query_dict({"connect_timeout": "7"})
    engine = create_engine(url.render_as_string(False), deadlines=DEADLINES)
    try:
        with engine.connect() as conn:
            params = conn.connection.driver_connection.info.get_parameters()  # type: ignore[union-attr]
    finally:
        engine.dispose()
    assert params["connect_timeout"] == "7"
    assert params["keepalives"] == "1"
    assert params["keepalives_idle"] == str(DEADLINES.keepalive_idle_seconds)
    assert params["tcp_user_timeout"] == str(int(DEADLINES.call_seconds * 1000))


def test_a_server_that_will_not_take_writes_is_a_connection_fault(db_url: str) -> None:
    """A read-only session (SQLSTATE 25006 on PostgreSQL, 1792 on MariaDB), as on a standby
    after a failover: the claim fails as DatabaseUnavailable (retryable), its connection
    invalidated with the pool, not as a database error that ends the relay."""
    backend = sa.make_url(db_url).get_backend_name()
    if backend == "sqlite":
        pytest.skip("SQLite has no read-only server")
    if backend == "postgresql":
        read_only = {"options": "-c default_transaction_read_only=on"}
    else:
        read_only = {"init_command": "SET SESSION TRANSACTION READ ONLY"}
    store = _store(db_url, connect_args=read_only)
    try:
        with pytest.raises(DatabaseUnavailable) as caught:
            store.claim("w", 10, LEASE)
    finally:
        store.dispose()
    assert caught.value.retryable
    assert getattr(caught.value.__cause__, "connection_invalidated", False)
    assert "read-only" in str(caught.value) or "READ ONLY" in str(caught.value)


def test_the_wake_ups_own_connection_takes_a_read_only_server_for_a_connection_fault(
    pg_url: str,
) -> None:
    """The wake-ups' reads on a connection of their own (the sequence look, the server
    statistics: RawReader) sort a server that will not take writes as the store does: a
    retryable DatabaseUnavailable, the connection dropped and the next read on a new one."""
    read_only = {"options": "-c default_transaction_read_only=on"}
    engine = create_engine(pg_url, deadlines=DEADLINES, connect_args=read_only)
    reader = RawReader(engine)
    try:
        with pytest.raises(DatabaseUnavailable) as caught:
            reader.rows("CREATE TABLE never_made (x integer)", {})
        assert caught.value.retryable
        assert "read-only" in str(caught.value)
        assert reader.rows("SELECT 1", {}) == [(1,)]
    finally:
        reader.close()
        engine.dispose()


@pytest.mark.timeout(60)
def test_a_statement_past_its_deadline_is_abandoned(pg_url: str) -> None:
    """A call the server never finishes (here: a sleep) is abandoned by the watchdog after
    its deadline, as a connection fault; the store works again at once."""
    store = _store(pg_url)
    try:
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable), store._tx() as conn:
            conn.execute(sa.text("SELECT pg_sleep(60)"))
        took = time.monotonic() - started
        assert store.watchdog is not None
        assert store.watchdog.abandoned == 1
        assert store.claim("w", 10, LEASE) == []
    finally:
        store.dispose()
    assert DEADLINES.call_seconds <= took < BOUND


@pytest.mark.timeout(60)
def test_a_frozen_endpoint_is_noticed_by_the_calls_own_deadline(
    db_url: str, proxy: TcpProxy
) -> None:
    """The server's host vanishes without a word (connections frozen, new ones unanswered): a
    call, its pre-ping on the pooled connection included, fails within its deadline instead of
    hanging (the watchdog on PostgreSQL, PyMySQL's read timeout on MariaDB), and a call after
    the endpoint answers again succeeds."""
    store = _store(proxy.url_for(db_url))
    try:
        assert store.claim("w", 10, LEASE) == []
        proxy.freeze()
        for _ in range(2):  # the pooled connection (pre-ping), then a new one (connect timeout)
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailable):
                store.claim("w", 10, LEASE)
            assert time.monotonic() - started < BOUND
        proxy.thaw()
        assert store.claim("w", 10, LEASE) == []
    finally:
        store.dispose()


def test_a_multi_host_url_connects_to_the_host_that_answers(pg_url: str) -> None:
    """``?host=a:port&host=b:port`` (libpq's host list, as SQLAlchemy spells it): the first
    host refuses, the relay connects to the second."""
    url = sa.make_url(pg_url)
    hosts = (f"127.0.0.1:{free_port()}", f"{url.host}:{url.port}")
    listed = url.set(host=None, port=None).update_query_dict({"host": hosts})
    engine = create_engine(listed.render_as_string(False), deadlines=DEADLINES)
    try:
        ping(engine)
    finally:
        engine.dispose()


@pytest.mark.timeout(60)
def test_the_server_statistics_look_is_abandoned_behind_a_frozen_endpoint(
    pg_url: str,
) -> None:
    """The many-databases wake-up's look at ``pg_stat_database`` (one connection per server,
    kept between looks) has the same deadline as the store's calls: behind an endpoint that
    acknowledges and never answers, it fails as a connection fault within its deadline, and
    reads again once the endpoint answers."""
    url = sa.make_url(pg_url)
    proxy = TcpProxy((url.host or "127.0.0.1", url.port or 0))
    engine = create_engine(proxy.url_for(pg_url), deadlines=DEADLINES, abandon_calls=True)
    stats = ServerStats(engine, [str(url.database)])
    try:
        assert str(url.database) in stats.inserted()
        proxy.freeze()
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable):
            stats.inserted()
        took = time.monotonic() - started
        proxy.thaw()
        assert str(url.database) in stats.inserted()
    finally:
        stats.close()
        proxy.close()
    assert DEADLINES.call_seconds <= took < BOUND
