"""What a test run must leave as it found it: the shared PostgreSQL server still running (the
same postmaster since the start) and none of the run's databases left behind."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from tests.support import databases, services


def postmaster_started(url: str = services.PG_ADMIN_URL) -> dt.datetime | None:
    """``pg_postmaster_start_time()`` of the server at ``url``; None when it is unreachable."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool, connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as conn:
            started: dt.datetime = conn.execute(
                sa.text("SELECT pg_postmaster_start_time()")
            ).scalar_one()
            return started
    except sa.exc.OperationalError:
        return None
    finally:
        engine.dispose()


def problems(started_before: dt.datetime | None) -> list[str]:
    """Why this run did not leave the machine as it found it (empty: it did)."""
    found = []
    if started_before is not None:
        after = postmaster_started()
        if after != started_before:
            state = "is down" if after is None else f"was restarted at {after.isoformat()}"
            found.append(
                f"the shared PostgreSQL server ({services.PG_ADMIN_URL}), running since "
                f"{started_before.isoformat()}, {state}: a test stopped the server everyone uses"
            )
    found += [f"database left behind (dropped now): {name}" for name in databases.sweep()]
    return found
