"""The fault tests' own PostgreSQL server (tests/support/pgserver.py) and the run's guard on the
shared one's start time."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from tests.support import guard, services
from tests.support.pgserver import PgServer, accepts_connections, throwaway_server


class TestFailedError(Exception):
    """Stands for a fault test failing while its server runs."""

    __test__ = False


def _restart_then_fail(servers: list[PgServer]) -> None:
    with throwaway_server() as server:
        servers.append(server)
        engine = sa.create_engine(server.admin_url, poolclass=sa.pool.NullPool)
        first = guard.postmaster_started(server.admin_url)
        assert first is not None
        server.stop()
        assert not accepts_connections(engine)
        assert guard.postmaster_started(server.admin_url) is None
        server.start()
        assert accepts_connections(engine)
        second = guard.postmaster_started(server.admin_url)
        assert second is not None
        assert second > first
        raise TestFailedError


def test_throwaway_server_restarts_on_its_url_and_is_removed_even_after_a_failure() -> None:
    """stop()/start() cut and restore the same URL, the guard's start time sees the restart,
    and the server is stopped and its directory deleted when the test fails."""
    servers: list[PgServer] = []
    with pytest.raises(TestFailedError):
        _restart_then_fail(servers)
    (server,) = servers
    assert not server.root.exists()
    assert not services.reachable(server.admin_url)
