"""A throw-away PostgreSQL server for the tests that stop or restart one.

The shared server on 5432 serves everyone on the machine (other checkouts, other suites); a fault
test that stops it breaks their work with "the database system is shutting down". Such a test
gets its own server instead (:mod:`tools.pgserver`): skipped when PostgreSQL is not installed,
failed under ``CI``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pytest
import sqlalchemy as sa

from tests.support import services
from tools.pgserver import FAST, PgServer, find_bindir, server

__all__ = ["PgServer", "accepts_connections", "throwaway_server"]


@contextmanager
def throwaway_server(settings: Mapping[str, str] = FAST) -> Iterator[PgServer]:
    """A started :class:`PgServer`, stopped and deleted on exit whatever happened.

    Skips the test when no PostgreSQL binaries are installed (fails it under ``CI``)."""
    if find_bindir() is None:
        message = "no PostgreSQL server binaries (initdb, pg_ctl) for a throw-away server"
        if services.IN_CI:
            pytest.fail(f"{message}; CI requires them", pytrace=False)
        pytest.skip(message)
    with server(settings) as pg:
        yield pg


def accepts_connections(engine: sa.Engine) -> bool:
    """Whether ``engine``'s server answers a query now."""
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError:
        return False
    return True
