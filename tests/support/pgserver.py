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
from tools.pgserver import FAST, REPLICATED, PgServer, find_bindir, replicated_pair, server

__all__ = [
    "REPLICATED",
    "PgServer",
    "accepts_connections",
    "in_recovery",
    "throwaway_pair",
    "throwaway_server",
]


def _require_binaries() -> None:
    if find_bindir() is None:
        message = "no PostgreSQL server binaries (initdb, pg_ctl) for a throw-away server"
        if services.IN_CI:
            pytest.fail(f"{message}; CI requires them", pytrace=False)
        pytest.skip(message)


@contextmanager
def throwaway_server(settings: Mapping[str, str] = FAST) -> Iterator[PgServer]:
    """A started :class:`PgServer`, stopped and deleted on exit whatever happened.

    Skips the test when no PostgreSQL binaries are installed (fails it under ``CI``)."""
    _require_binaries()
    with server(settings) as pg:
        yield pg


@contextmanager
def throwaway_pair() -> Iterator[tuple[PgServer, PgServer]]:
    """A started primary and its synchronous streaming standby, both of the test's own, stopped
    and deleted on exit (:func:`tools.pgserver.replicated_pair`); skipped as above."""
    _require_binaries()
    with replicated_pair() as pair:
        yield pair


def in_recovery(url: str) -> bool:
    """Whether the server at ``url`` is a standby (read-only, in recovery)."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return bool(conn.execute(sa.text("SELECT pg_is_in_recovery()")).scalar())
    finally:
        engine.dispose()


def accepts_connections(engine: sa.Engine) -> bool:
    """Whether ``engine``'s server answers a query now."""
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError:
        return False
    return True
