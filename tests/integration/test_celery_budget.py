"""The Celery fleet over several databases within the connection budget (issue 39), on real
PostgreSQL, SQLite and RabbitMQ: beat watches each PostgreSQL server on one connection, the
tick counts at most RELAY_MAX_CONNECTIONS databases at once, and a worker process gives each
database's connection back after its task."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from relay.celery.databases import Runtimes, fleet_tick
from relay.config import Settings
from relay.dispatch.serverwatch import server_watches
from relay.store.engine import create_engine
from tests.support import databases
from tests.support.broker import Collector
from tests.support.env import wait_until

pytestmark = pytest.mark.timeout(120)


def _insert(url: str, count: int) -> None:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text("INSERT INTO outbox (event_type, payload) VALUES ('tenant.event', '{}')"),
                [{}] * count,
            )
    finally:
        engine.dispose()


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
        watches = server_watches(settings, woken.append)
        assert len(watches) == 1
        assert sorted(watches[0].datnames.values()) == ["a", "b"]
        watches[0].start()
        try:
            wait_until(lambda: woken, 10, "the first look")
            _insert(pgs[1], 1)
            wait_until(lambda: ("b",) in woken, 10, "the wake-up of b")
        finally:
            watches[0].stop()


def test_the_tick_counts_within_the_budget_and_gives_the_connections_back(
    pgs: list[str], amqp_url: str, exchange_name: str
) -> None:
    """Six databases, RELAY_MAX_CONNECTIONS=3: the tick's counts are right (the big backlog
    gets most tasks) and afterwards the worker process holds no connection to any of them."""
    _insert(pgs[0], 500)
    _insert(pgs[1], 3)
    spec = ",".join(f"t{i}={u}" for i, u in enumerate(pgs))
    settings = Settings(
        databases=spec, broker_url=amqp_url, exchange=exchange_name, max_connections=3
    )
    runtimes = Runtimes(settings)
    sent: list[str] = []
    collector = Collector(amqp_url, exchange_name)
    try:
        shares = fleet_tick(settings, runtimes, sent.append)
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
