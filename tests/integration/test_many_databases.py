"""Several outbox databases named in ``RELAY_DATABASES`` (issue 23), on real PostgreSQL, MariaDB
and RabbitMQ: each database's messages carry its own CloudEvents source, the commands act per
database (``--source``), and the Celery fleet's tick shares its fan-out by backlog."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from relay.celery.many_databases import Runtimes, fleet_tick
from relay.config import Settings
from relay.config.databases import Fleet
from relay.store.engine import create_engine
from tests.support import databases
from tests.support.broker import Collector
from tests.support.rows import insert_at

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def two(backend_pool: databases.BackendPool) -> Iterator[dict[str, str]]:
    """Two migrated outbox databases: ``orders`` on PostgreSQL, ``billing`` on MariaDB."""
    with (
        backend_pool.database("postgresql") as orders,
        backend_pool.database("mysql") as billing,
    ):
        yield {"orders": orders, "billing": billing}


def _spec(urls: dict[str, str]) -> str:
    return ",".join(f"{name}={url}" for name, url in urls.items())


def _relay(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    return subprocess.run(
        [sys.executable, "-m", "relay", *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_dispatch_once_relays_each_database_with_its_own_source(
    two: dict[str, str], amqp_url: str, exchange_name: str, collector: Collector
) -> None:
    """`relay dispatch --once` over two databases sends every row of each; every message
    carries its own database's CloudEvents source (RELAY_SOURCE + /name)."""
    insert_at(two["orders"], 5, "order.created")
    insert_at(two["billing"], 3, "order.created")
    env = {
        "RELAY_DATABASES": _spec(two),
        "RELAY_BROKER_URL": amqp_url,
        "RELAY_EXCHANGE": exchange_name,
        "RELAY_SOURCE": "/shop",
    }
    done = _relay(env, "dispatch", "--once")
    assert done.returncode == 0, done.stderr
    received = collector.drain(8, settle=0.3)
    sources = sorted(m.headers["cloudEvents:source"] for m in received)
    assert sources == ["/shop/billing"] * 3 + ["/shop/orders"] * 5
    assert len({m.message_id for m in received}) == 8


def test_commands_act_per_database_and_refuse_ambiguity(two: dict[str, str]) -> None:
    """status --json reports each database; a row command without --source is refused naming
    the choices; with --source it acts on that database only."""
    insert_at(two["billing"], 2, "order.created")
    env = {"RELAY_DATABASES": _spec(two)}
    status = _relay(env, "status", "--json")
    assert status.returncode == 0, status.stderr
    import json

    doc = json.loads(status.stdout)["databases"]
    assert doc["orders"]["counts"]["pending"] == 0
    assert doc["billing"]["counts"]["pending"] == 2
    refused = _relay(env, "pending", "list")
    assert refused.returncode == 2
    assert "2 databases (orders, billing)" in refused.stderr
    assert "--source NAME" in refused.stderr
    listed = _relay(env, "pending", "list", "--source", "billing", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)["events"]) == 2


def test_migrate_migrates_every_database(backend_pool: databases.BackendPool) -> None:
    """`relay migrate` with RELAY_DATABASES creates the outbox in each database."""
    with (
        backend_pool.database("postgresql", migrated=False) as a,
        backend_pool.database("mysql", migrated=False) as b,
    ):
        done = _relay({"RELAY_DATABASES": f"a={a},b={b}"}, "migrate")
        assert done.returncode == 0, done.stderr
        assert "== a ==" in done.stdout
        assert "== b ==" in done.stdout
        for url in (a, b):
            engine = create_engine(url)
            try:
                assert sa.inspect(engine).has_table("outbox")
            finally:
                engine.dispose()


def test_the_fleet_tick_shares_the_fanout_by_backlog_and_survives_a_database_down(
    two: dict[str, str], amqp_url: str, exchange_name: str
) -> None:
    """The tick counts each database's backlog and deals RELAY_MAX_FANOUT tasks: the big
    backlog most, the small one at least one; a database that is down still gets one task
    (its own claim reports the outage) and does not stop the others' share."""
    insert_at(two["orders"], 1000, "order.created")
    insert_at(two["billing"], 3, "order.created")
    down = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere?connect_timeout=1"
    settings = Settings(
        databases=f"{_spec(two)},down={down}",
        broker_url=amqp_url,
        exchange=exchange_name,
        max_fanout=8,
        # The counts' deadline is half a tick: 2 s, so that a count that opens its connection
        # on a loaded machine is not taken for a database that is down (0.5 s at the default
        # tick missed the 1,000-row backlog once at a load average of 9).
        tick_seconds=4.0,
    )
    runtimes = Runtimes(Fleet.from_settings(settings))
    sent: list[str] = []
    try:
        shares = fleet_tick(runtimes, sent.append)
    finally:
        runtimes.close()
    assert shares == {"orders": 6, "billing": 1, "down": 1}
    assert sent[:3] == ["orders", "billing", "down"]
    assert len(sent) == 8
