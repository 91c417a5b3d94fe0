"""The many-databases runner's decisions that need no server (relay.runners.many.workers): its
budget check at start, the pace of polled databases, and liveness while a unit hangs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from relay.config import Settings
from relay.config.databases import Fleet, server_of
from relay.exceptions import ConfigError
from relay.runners.many.schedule import POLLED_LOOKS_PER_SECOND, polled_ceiling
from relay.runners.many.workers import ManyDatabases


def _sqlite(tmp_path: Path, n: int) -> str:
    return ",".join(f"t{i}=sqlite:///{tmp_path}/t{i}.sqlite3" for i in range(n))


def test_a_budget_the_wake_ups_would_use_up_is_refused_at_start() -> None:
    """Two PostgreSQL servers watched and RELAY_MAX_CONNECTIONS=2: nothing left to relay
    with, so the process refuses to start, naming the variable and the way out."""
    settings = Settings(
        databases="a=postgresql://relay@db1/a,b=postgresql://relay@db2/b", max_connections=2
    )
    with pytest.raises(ConfigError, match="RELAY_MAX_CONNECTIONS=2 leaves no connection"):
        ManyDatabases(Fleet.from_settings(settings))


def test_workers_are_the_connections_left_after_the_wake_ups(tmp_path: Path) -> None:
    """No PostgreSQL server to watch: every connection of the budget relays, one worker each,
    never more workers than databases."""
    assert (
        ManyDatabases(
            Fleet.from_settings(Settings(databases=_sqlite(tmp_path, 20), max_connections=4))
        ).workers
        == 4
    )
    assert ManyDatabases(Fleet.from_settings(Settings(databases=_sqlite(tmp_path, 3)))).workers == 3


@pytest.mark.parametrize(("polled", "expected"), [(1, 0.2), (10, 0.2), (100, 2.0), (500, 10.0)])
def test_polled_databases_share_their_looks(polled: int, expected: float) -> None:
    """Databases nothing watches back off to one database's idle poll, or slower when there
    are so many that they would look more than POLLED_LOOKS_PER_SECOND times a second."""
    assert POLLED_LOOKS_PER_SECOND == 50.0
    assert polled_ceiling(Settings().idle_poll_seconds, polled) == pytest.approx(expected)


def test_liveness_fails_while_a_unit_runs_longer_than_a_lease(tmp_path: Path) -> None:
    """The heartbeat is not touched while a worker's unit has run for more than a lease:
    every call in it has a shorter deadline, so it hangs."""
    tenants = ManyDatabases(
        Fleet.from_settings(Settings(databases=_sqlite(tmp_path, 2), lease_seconds=3))
    )
    assert not tenants.hung()
    tenants._started["t0"] = time.monotonic() - 1
    assert not tenants.hung()
    tenants._started["t1"] = time.monotonic() - 4
    assert tenants.hung()


@pytest.mark.parametrize(
    ("url", "server"),
    [
        ("postgresql+psycopg://relay:pw@db1/orders", "db1:5432"),
        ("postgresql://relay@db1:5432/billing", "db1:5432"),
        ("mysql+pymysql://relay@db2/shop", "db2:3306"),
        ("sqlite:////var/lib/relay/a.sqlite3", "sqlite:/var/lib/relay/a.sqlite3"),
    ],
)
def test_databases_count_against_their_servers_budget(url: str, server: str) -> None:
    """Connections count per server: host and port, the default port when none is given."""
    assert server_of(sa.make_url(url)) == server
