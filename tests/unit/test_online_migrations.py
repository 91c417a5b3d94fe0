"""The pure parts of online migrations: which schema a relay runs on, which errors are lock
timeouts, and what bounds a statement's wait on each database."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError

from relay.migrations.lock_retries import is_lock_timeout, table_of
from relay.migrations.online import lock_timeout_statements
from relay.store.schema.compat import MINIMUM_REVISION, Verdict, verdict


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        (None, Verdict.UNVERSIONED),  # made by metadata.create_all: taken as it is
        ("0014", Verdict.TOO_OLD),  # the previous release's schema: migrate first
        ("0001", Verdict.TOO_OLD),
        (MINIMUM_REVISION, Verdict.RUNS),
        ("0016", Verdict.RUNS),  # a later release migrated it: compatible by the rule
        ("0016_future", Verdict.RUNS),  # a name this code does not know: a later one's
    ],
)
def test_a_relay_runs_on_its_minimum_and_newer_and_refuses_older(
    found: str | None, expected: Verdict
) -> None:
    assert verdict(found, "0015") is expected


class _PgError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__("text that is never read")
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("orig", "expected"),
    [
        (_PgError("55P03"), True),  # lock_not_available: the lock_timeout
        (_PgError("57014"), False),  # a statement_timeout is no lock wait
        (Exception(1205, "Lock wait timeout exceeded"), True),  # MariaDB, metadata locks too
        (Exception(1213, "Deadlock found"), False),
    ],
)
def test_lock_timeouts_are_told_by_code(orig: Exception, expected: bool) -> None:
    assert is_lock_timeout(OperationalError("ALTER TABLE outbox", {}, orig)) is expected


@pytest.mark.parametrize(
    ("statement", "table"),
    [
        ("ALTER TABLE outbox ADD COLUMN expires_at TIMESTAMP WITH TIME ZONE", "outbox"),
        ('CREATE TABLE "relay_pauses" (id BIGINT)', "relay_pauses"),
        ("CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_a ON outbox (id)", "outbox"),
        (None, "outbox"),
    ],
)
def test_the_table_a_timed_out_statement_names(statement: str | None, table: str) -> None:
    assert table_of(statement) == table


def test_lock_timeouts_per_database() -> None:
    """PostgreSQL takes milliseconds; MariaDB whole seconds, at least one (with none, a busy
    outbox nearly always has a writer's transaction open); SQLite has no lock queue."""
    assert lock_timeout_statements("postgresql", 300) == ["SET lock_timeout = 300"]
    assert lock_timeout_statements("mysql", 300) == ["SET SESSION lock_wait_timeout = 1"]
    assert lock_timeout_statements("mariadb", 2500) == ["SET SESSION lock_wait_timeout = 2"]
    assert lock_timeout_statements("sqlite", 300) == []
