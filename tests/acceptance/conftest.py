"""Acceptance fixtures: the acceptance suite runs against PostgreSQL only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from relay.store import migrate
from relay.store.engine import create_engine
from tests.support.pgserver import PgServer, throwaway_server


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
    migrate.upgrade(url)
    return url


@pytest.fixture
def own_engine(own_pg_url: str) -> Iterator[sa.Engine]:
    """An engine on :func:`own_pg_url`."""
    eng = create_engine(own_pg_url)
    yield eng
    eng.dispose()
