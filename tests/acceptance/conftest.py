"""Acceptance fixtures: the acceptance suite runs against PostgreSQL only."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa

from relay.store.engine import create_engine
from relay.store.schema import upgrade
from tests.support.pgserver import PgServer, throwaway_server
from tests.support.proxy import TcpProxy, running_proxy


@pytest.fixture
def engine(pg_url: str) -> Iterator[sa.Engine]:
    """An engine on the test's PostgreSQL database (overrides the all-backends one)."""
    eng = create_engine(pg_url)
    yield eng
    eng.dispose()


@pytest.fixture
def own_pg() -> Iterator[PgServer]:
    """A PostgreSQL server of the test's own, for faults that stop or restart it; removed at
    teardown, also when the test fails."""
    with throwaway_server() as server:
        yield server


@pytest.fixture
def own_pg_url(own_pg: PgServer) -> str:
    """A migrated outbox database on the test's own server (gone with the server)."""
    url = own_pg.create_database("relay")
    upgrade.upgrade(url)
    return url


@pytest.fixture
def own_engine(own_pg_url: str) -> Iterator[sa.Engine]:
    """An engine on :func:`own_pg_url`."""
    eng = create_engine(own_pg_url)
    yield eng
    eng.dispose()


@pytest.fixture
def amqp_proxy(amqp_url: str) -> Iterator[TcpProxy]:
    """A proxy in front of the shared RabbitMQ, to cut or freeze it for one test's relays."""
    parts = urlsplit(amqp_url)
    with running_proxy(parts.hostname or "127.0.0.1", parts.port or 5672) as p:
        yield p


@pytest.fixture
def pg_proxy(pg_url: str) -> Iterator[TcpProxy]:
    """A proxy in front of the shared PostgreSQL, to cut or freeze it for one test's relays."""
    parts = sa.make_url(pg_url)
    with running_proxy(parts.host or "127.0.0.1", parts.port or 5432) as p:
        yield p
