"""The Celery fleet over several databases within the connection budget (issue 39), on real
PostgreSQL, SQLite and RabbitMQ: beat watches each PostgreSQL server on one connection, the
tick counts at most RELAY_MAX_CONNECTIONS databases at once, and a worker process gives each
database's connection back after its task."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from relay.celery.many_databases import Runtimes, fleet_tick
from relay.config import Settings
from relay.config.databases import Fleet
from relay.wakeup.serverwatch import server_watches
from tests.support import databases
from tests.support.broker import Collector
from tests.support.env import wait_until
from tests.support.rows import insert_at

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def pgs(backend_pool: databases.BackendPool) -> Iterator[list[str]]:
    with ExitStack() as stack:
        yield [stack.enter_context(backend_pool.database("postgresql")) for _ in range(6)]


def _pooled(runtimes: Runtimes) -> int:
    """Connections the runtimes' engines hold (checked in or out)."""
    total = 0
    for _, rt in runtimes:
        store = rt._store
        if store is not None:
            pool = store.engine.pool
            total += pool.checkedin() + pool.checkedout()  # type: ignore[attr-defined]
    return total


def test_beat_watches_each_postgresql_server_once(
    pgs: list[str], backend_pool: databases.BackendPool
) -> None:
    """Two PostgreSQL databases of one server and a SQLite one: one watch, for the server,
    waking the database that took rows by its name; SQLite is the tick's to count."""
    with backend_pool.database("sqlite") as lite:
        settings = Settings(databases=f"a={pgs[0]},b={pgs[1]},lite={lite}")
        woken: list[tuple[str, ...]] = []
        watches = server_watches(Fleet.from_settings(settings), woken.append)
        assert len(watches) == 1
        assert sorted(watches[0].datnames.values()) == ["a", "b"]
        watches[0].start()
        try:
            wait_until(lambda: woken, 10, "the first look")
            insert_at(pgs[1], 1)
            wait_until(lambda: ("b",) in woken, 10, "the wake-up of b")
        finally:
            watches[0].stop()


def test_the_tick_counts_within_the_budget_and_gives_the_connections_back(
    pgs: list[str], amqp_url: str, exchange_name: str
) -> None:
    """Six databases, RELAY_MAX_CONNECTIONS=3: the tick's counts are right (the big backlog
    gets most tasks) and afterwards the worker process holds no connection to any of them."""
    insert_at(pgs[0], 500)
    insert_at(pgs[1], 3)
    spec = ",".join(f"t{i}={u}" for i, u in enumerate(pgs))
    # A 10 s tick gives the counts 5 s: a count that does not answer in time counts as one
    # row, and six cold connections on a loaded machine can take longer than the default's.
    settings = Settings(
        databases=spec,
        broker_url=amqp_url,
        exchange=exchange_name,
        max_connections=3,
        tick_seconds=10,
    )
    runtimes = Runtimes(Fleet.from_settings(settings))
    sent: list[str] = []
    collector = Collector(amqp_url, exchange_name)
    try:
        shares = fleet_tick(runtimes, sent.append)
        assert shares["t0"] > shares["t1"] >= 1
        assert all(shares[f"t{i}"] == 0 for i in range(2, 6))
        assert _pooled(runtimes) == 0
        rt = runtimes.get("t0")
        with rt.held():
            report = rt.dispatcher().drain(budget_seconds=30)
        assert report.sent == 500
        assert _pooled(runtimes) == 0
        assert len(collector.drain(500, timeout=30)) == 500
    finally:
        runtimes.close()
        collector.close()


def test_the_tick_counts_only_the_databases_that_moved_until_their_net(pgs: list[str]) -> None:
    """PostgreSQL: the first tick counts every database (and writes its heartbeat there);
    once settled, an idle database is not counted again before COUNT_NET_SECONDS, and a
    database that took a row is counted at the next tick and gets its task."""
    spec = ",".join(f"t{i}={u}" for i, u in enumerate(pgs))
    settings = Settings(databases=spec, max_connections=3, tick_seconds=10)
    runtimes = Runtimes(Fleet.from_settings(settings))
    counted: list[str] = []
    original = runtimes.plan.choose

    def choose(*args: object, **kwargs: object) -> list[str]:
        names = original(*args, **kwargs)  # type: ignore[arg-type]
        counted[:] = names
        return names

    runtimes.plan.choose = choose  # type: ignore[method-assign]
    sent: list[str] = []
    try:
        fleet_tick(runtimes, sent.append)
        assert sorted(counted) == sorted(f"t{i}" for i in range(6))
        assert sent == []  # nothing to relay anywhere
        # The heartbeats just written move each figure once; statistics reach the server
        # when the writer's session ends (the count's connection is closed after it).
        wait_until(
            lambda: (fleet_tick(runtimes, sent.append), counted == [])[1],
            15,
            "a tick that counts nothing",
        )
        assert sent == []
        insert_at(pgs[4], 1)
        wait_until(
            lambda: (fleet_tick(runtimes, sent.append), "t4" in counted)[1],
            15,
            "the database that took a row to be counted",
        )
        assert counted == ["t4"], counted
        assert sent == ["t4"]
    finally:
        runtimes.close()
