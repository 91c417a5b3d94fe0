"""What each database needs to mean the same thing: UTC clocks, aware timestamps, claim plans."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from relay.store.dialects import for_name
from relay.store.dialects.mysql import MySQLDialect
from relay.store.dialects.sqlite import SQLiteDialect
from relay.store.dispatch_path.store import DispatchStore
from relay.store.engine import create_engine
from relay.store.operations.store import OperationsStore
from relay.store.schema.tables import outbox
from tests.support import databases
from tests.support.rows import enqueue_many, rows

#: Far from UTC on purpose, and with a half hour, so an hour-only mistake shows too.
FAR_ZONE = timezone(timedelta(hours=9, minutes=30))


def _far_session(url: str) -> dict[str, Any]:
    """Engine options that give every session the time zone ``FAR_ZONE``."""
    name = sa.make_url(url).get_backend_name()
    if name in ("mysql", "mariadb"):
        return {"connect_args": {"init_command": "SET time_zone = '+09:30'"}}
    if name == "postgresql":
        return {"connect_args": {"options": "-c TimeZone=+09:30"}}
    return {}  # SQLite has no session time zone: 'now' is UTC


@pytest.fixture
def far_store(db_url: str) -> Iterator[DispatchStore]:
    """A store whose sessions run in a time zone nine and a half hours from UTC."""
    store = DispatchStore(create_engine(db_url, **_far_session(db_url)))
    yield store
    store.dispose()


def test_aware_timestamps_round_trip_as_the_same_instant(
    store: DispatchStore, engine: sa.Engine
) -> None:
    """A non-UTC aware datetime written through the schema reads back as the same instant,
    still aware, whatever the database's native type."""
    (row_id,) = enqueue_many(engine, 1)
    when = datetime(2031, 3, 4, 5, 6, 7, 891_000, tzinfo=FAR_ZONE)
    with engine.begin() as conn:
        conn.execute(sa.update(outbox).values(next_retry_at=when).where(outbox.c.id == row_id))
    got = rows(engine, row_id)[row_id]["next_retry_at"]
    assert got.tzinfo is not None
    assert got == when


def test_database_clock_is_utc_whatever_the_session_time_zone(far_store: DispatchStore) -> None:
    """In a +09:30 session the database clock, the lease and the due check all stay in UTC."""
    engine, clock = far_store.engine, far_store.dialect
    with engine.connect() as conn:
        db_now = conn.execute(sa.select(clock.now())).scalar_one()
    assert abs((db_now - datetime.now(UTC)).total_seconds()) < 5

    due, later = enqueue_many(engine, 2)
    with engine.begin() as conn:
        for row_id, offset in ((due, -3600), (later, 3600)):
            when = (datetime.now(UTC) + timedelta(seconds=offset)).astimezone(FAR_ZONE)
            conn.execute(sa.update(outbox).values(next_retry_at=when).where(outbox.c.id == row_id))
    claimed = far_store.claim("w", 10, lease_seconds=60)
    assert [e.id for e in claimed] == [due], "due-ness must compare instants, not wall clocks"
    locked_until = rows(engine, due)[due]["locked_until"]
    assert 55 <= (locked_until - datetime.now(UTC)).total_seconds() <= 61


def test_status_ages_are_measured_in_database_time(
    operations: OperationsStore, engine: sa.Engine
) -> None:
    """The oldest pending row's age is a small positive number of seconds right after insert."""
    enqueue_many(engine, 3)
    age = operations.status().oldest_pending_age_seconds
    assert age is not None
    assert 0 <= age < 30


@pytest.fixture(params=["mysql", "sqlite"])
def history_engine(
    request: pytest.FixtureRequest, backend_pool: databases.BackendPool
) -> Iterator[sa.Engine]:
    """An outbox with a long sent history and a few pending rows (PostgreSQL has its own
    plan test in test_claim_plan.py)."""
    with backend_pool.database(request.param) as url:
        engine = create_engine(url)
        with engine.begin() as conn:
            sent = {"event_type": "old", "payload": {}, "status": "sent"}
            conn.execute(sa.insert(outbox), [sent] * 20_000)
            conn.execute(sa.insert(outbox), [{"event_type": "new", "payload": {}}] * 50)
            conn.exec_driver_sql(
                "ANALYZE" if engine.dialect.name == "sqlite" else "ANALYZE TABLE outbox"
            )
        yield engine
        engine.dispose()


def test_claim_reads_only_unfinished_rows_through_an_index(history_engine: sa.Engine) -> None:
    """The claim's row source is an index that skips sent history, not a scan or a sort."""
    dialect = for_name(history_engine.dialect.name)
    with history_engine.begin() as conn:
        if isinstance(dialect, MySQLDialect):
            for due in (dialect.pending_due(), dialect.lease_expired()):
                stmt = dialect.pick_statement(due, 100)
                sql = str(stmt.compile(history_engine, compile_kwargs={"literal_binds": True}))
                outer = conn.exec_driver_sql(f"EXPLAIN {sql}").mappings().first()
                assert outer is not None
                assert (outer["key"], outer["type"]) == ("ix_outbox_status_seq_id", "ref"), outer
                assert "filesort" not in (outer["Extra"] or ""), outer
        else:
            assert isinstance(dialect, SQLiteDialect)
            stmt = dialect.claim_statement(worker="w", limit=100, lease_seconds=30)
            compiled = stmt.compile(history_engine)
            plan = conn.exec_driver_sql(
                f"EXPLAIN QUERY PLAN {compiled.string}",
                tuple(compiled.params[name] for name in compiled.positiontup or ()),
            ).all()
            text = "\n".join(str(step[-1]) for step in plan)
            assert "ix_outbox_pending" in text, text
            assert "ix_outbox_leases" in text, text
            assert "SCAN outbox\n" not in text + "\n", text
