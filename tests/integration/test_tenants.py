"""Many databases in one relay process (issue 39), on real PostgreSQL, MariaDB, SQLite and
RabbitMQ: the server-wide wake-up, ``--once`` over every kind with a database down, the
connection budget held while draining, and the doctor's budget checks."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from relay.commands.doctor import budget as doctor_budget
from relay.config import Settings
from relay.config.databases import Fleet
from relay.runners.many import workers
from relay.store.dispatch_path.serverstats import ServerStats, changed
from relay.store.engine import create_engine
from relay.wakeup.serverwatch import ServerWatcher
from tests.support import databases
from tests.support.broker import Collector
from tests.support.env import wait_until
from tests.support.rows import insert_at

pytestmark = pytest.mark.timeout(120)

DOWN = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere?connect_timeout=1"


def _unfinished(url: str) -> int:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            query = "SELECT count(*) FROM outbox WHERE status IN ('pending', 'processing')"
            return int(conn.execute(sa.text(query)).scalar_one())
    finally:
        engine.dispose()


@pytest.fixture
def pgs(backend_pool: databases.BackendPool) -> Iterator[list[str]]:
    """Six PostgreSQL outbox databases on the shared server."""
    with ExitStack() as stack:
        yield [stack.enter_context(backend_pool.database("postgresql")) for _ in range(6)]


def _datname(url: str) -> str:
    return str(sa.make_url(url).database)


def test_server_stats_see_which_database_inserted(pgs: list[str]) -> None:
    """One connection to the server reads every database's insert count; a commit in one
    moves that one's count only."""
    a, b = pgs[:2]
    stats = ServerStats(create_engine(a), [_datname(a), _datname(b)])
    try:
        before = stats.inserted()
        assert set(before) == {_datname(a), _datname(b)}
        insert_at(b, 3)
        wait_until(lambda: changed(before, stats.inserted()), 10, "the statistics to move")
        assert changed(before, stats.inserted()) == [_datname(b)]
    finally:
        stats.close()


def test_the_server_watch_wakes_the_database_that_took_rows(pgs: list[str]) -> None:
    """The watcher first wakes every database (rows may have come before it looked), then
    only the one whose rows were committed, by its relay name."""
    a, b = pgs[:2]
    woken: list[tuple[str, ...]] = []
    url = sa.make_url(a)
    watch = ServerWatcher("server", url, {_datname(a): "alpha", _datname(b): "beta"}, woken.append)
    watch.start()
    try:
        wait_until(lambda: woken, 10, "the first look")
        assert woken[0] == ()
        assert watch.connected
        insert_at(a, 1)
        wait_until(lambda: ("alpha",) in woken, 10, "the wake-up of alpha")
        assert all(w in ((), ("alpha",)) for w in woken)
    finally:
        watch.stop()


def test_an_idle_server_watch_backs_off_and_a_commit_still_wakes_its_database(
    pgs: list[str],
) -> None:
    """With nothing inserted the watch backs off from the floor to the idle look (four looks a
    second at the defaults, not forty); a commit is still seen, at the look that follows it,
    which puts the watch back at the floor."""
    a, b = pgs[:2]
    woken: list[tuple[str, ...]] = []
    datnames = {_datname(a): "alpha", _datname(b): "beta"}
    watch = ServerWatcher("server", sa.make_url(a), datnames, woken.append, 0.025, idle=0.25)
    watch.start()
    try:
        wait_until(lambda: watch.pace.wait == 0.25, 10, "the watch to back off")
        looks = watch.looks
        time.sleep(2.0)
        idle_looks = watch.looks - looks
        committed = time.monotonic()
        insert_at(a, 1)
        wait_until(lambda: ("alpha",) in woken, 10, "the wake-up of alpha")
        active = watch.pace.last_active
    finally:
        watch.stop()
    # At the floor 2 s hold 80 looks; at the idle look 8, give or take one each side.
    assert 4 <= idle_looks <= 10, idle_looks
    assert active is not None
    assert active >= committed


def test_once_drains_every_kind_of_database_and_fails_for_the_one_down(
    backend_pool: databases.BackendPool, amqp_url: str, exchange_name: str
) -> None:
    """``--once`` in one process over PostgreSQL, MariaDB and SQLite, with a database that is
    down: the three are drained, every event reaches the broker, and the run exits 1."""
    with (
        backend_pool.database("postgresql") as pg,
        backend_pool.database("mysql") as maria,
        backend_pool.database("sqlite") as lite,
    ):
        urls = {"pg": pg, "maria": maria, "lite": lite}
        for url in urls.values():
            insert_at(url, 50)
        spec = ",".join(f"{n}={u}" for n, u in {**urls, "down": DOWN}.items())
        settings = Settings(databases=spec, broker_url=amqp_url, exchange=exchange_name)
        collector = Collector(amqp_url, exchange_name)
        try:
            with pytest.raises(SystemExit) as exited:
                workers.run(settings, once=True)
            received = collector.drain(150, timeout=30)
        finally:
            collector.close()
        assert exited.value.code == 1
        assert {n: _unfinished(u) for n, u in urls.items()} == {"pg": 0, "maria": 0, "lite": 0}
    assert len({m.message_id for m in received}) == 150


def test_the_loop_stays_within_a_small_budget(
    pgs: list[str], amqp_url: str, exchange_name: str
) -> None:
    """RELAY_MAX_CONNECTIONS=3 over six databases with rows (one connection for the server's
    wake-up, two to relay with): the process never holds more than 3 (by its own count and
    by the server's), every row is sent, and once idle only the wake-up's is left."""
    for url in pgs:
        insert_at(url, 300)
    spec = ",".join(f"t{i}={u}" for i, u in enumerate(pgs))
    settings = Settings(
        databases=spec, broker_url=amqp_url, exchange=exchange_name, max_connections=3
    )
    collector = Collector(amqp_url, exchange_name)
    relay = workers.ManyDatabases(Fleet.from_settings(settings))
    assert relay.workers == 2
    runner = threading.Thread(target=relay.run, daemon=True)
    admin = create_engine(databases.services.PG_ADMIN_URL, poolclass=NullPool)
    held: list[int] = []

    def server_count() -> int:
        with admin.connect() as conn:
            query = (
                "SELECT count(*) FROM pg_stat_activity WHERE datname = ANY(:d) "
                "AND application_name = 'relay'"
            )
            return int(conn.execute(sa.text(query), {"d": [_datname(u) for u in pgs]}).scalar())

    def drained() -> bool:
        held.append(server_count())
        held.append(relay.budget()["in_use"])
        return sum(_unfinished(u) for u in pgs) == 0

    runner.start()
    try:
        wait_until(drained, 60, "every database drained", interval=0.1)
        wait_until(lambda: server_count() == 1, 30, "the idle databases' connections closed")
        received = collector.drain(6 * 300, timeout=30)
    finally:
        relay.stop.set()
        runner.join(30)
        collector.close()
        admin.dispose()
    assert not runner.is_alive()
    assert max(held) <= 3, held
    assert len({m.message_id for m in received}) == 6 * 300


def test_the_doctor_reports_the_budget_and_each_servers_headroom(pgs: list[str]) -> None:
    """Over several databases the doctor adds the budget (pass) and the server's
    max_connections with the connections open now; a budget that leaves nothing after the
    wake-ups fails with its fix."""
    settings = Settings(databases=f"a={pgs[0]},b={pgs[1]}")
    found = {c.name: c for c in doctor_budget.checks(settings)}
    assert found["connection budget"].status == "pass"
    assert (
        "20 connections at most for 2 databases on 1 servers" in found["connection budget"].detail
    )
    server = next(c for n, c in found.items() if n.startswith("connections on"))
    assert "max_connections" in server.detail, server
    tight = Settings(databases=f"a={pgs[0]},down={DOWN}", max_connections=2)
    budget = {c.name: c for c in doctor_budget.checks(tight)}["connection budget"]
    assert budget.status == "fail"
    assert "RELAY_MAX_CONNECTIONS=3" in budget.fix
