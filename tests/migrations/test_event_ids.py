"""Migration 0010 (``outbox.event_id``) on a database with history and rows in flight."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from relay.store.engine import create_engine
from relay.store.schema import upgrade
from relay.store.schema.tables import outbox
from tests.support import databases

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.fixture(params=databases.ENABLED)
def url_at_0009(
    request: pytest.FixtureRequest, backend_pool: databases.BackendPool
) -> Iterator[str]:
    """A database of each enabled kind migrated to revision 0009, before event ids."""
    with backend_pool.database(request.param, migrated=False) as url:
        upgrade.upgrade(url, "0009")
        yield url


def _insert(conn: sa.Connection, status: str) -> None:
    conn.execute(
        sa.text("INSERT INTO outbox (event_type, payload, status) VALUES ('old', '{}', :s)"),
        {"s": status},
    )


def _ids(conn: sa.Connection) -> dict[str, list[str | None]]:
    rows = conn.execute(sa.text("SELECT status, event_id FROM outbox ORDER BY id")).all()
    by_status: dict[str, list[str | None]] = {}
    for status, event_id in rows:
        by_status.setdefault(status, []).append(event_id)
    return by_status


def test_upgrade_gives_unfinished_rows_an_id_and_leaves_the_sent_history(url_at_0009: str) -> None:
    """Pending, processing and failed rows get distinct UUIDs; sent rows keep NULL (no rewrite
    of the history); a plain-SQL insert afterwards gets one from the database; downgrade
    removes the column and `check` holds both ways."""
    engine = create_engine(url_at_0009)
    try:
        with engine.begin() as conn:
            for status in ("sent", "sent", "pending", "processing", "failed"):
                _insert(conn, status)
        upgrade.upgrade(url_at_0009)
        upgrade.check(url_at_0009)
        with engine.begin() as conn:
            _insert(conn, "pending")
            by_status = _ids(conn)
        unfinished = by_status["pending"] + by_status["processing"] + by_status["failed"]
        assert len(unfinished) == 4
        assert all(isinstance(i, str) and UUID.match(i) for i in unfinished), unfinished
        assert len(set(unfinished)) == 4
        assert by_status["sent"] == [None, None]
        upgrade.downgrade(url_at_0009, "0009")
        with engine.connect() as conn:
            columns = {c["name"] for c in sa.inspect(conn).get_columns("outbox")}
        assert "event_id" not in columns
        upgrade.upgrade(url_at_0009)
        upgrade.check(url_at_0009)
    finally:
        engine.dispose()


def test_ids_written_by_the_database_are_distinct_at_volume(db_url: str) -> None:
    """2,000 rows inserted in multi-row statements each get a distinct UUID (the database
    evaluates the default per row, not once per statement)."""
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.insert(outbox), [{"event_type": "bulk", "payload": {}}] * 2000)
            ids = conn.execute(sa.text("SELECT event_id FROM outbox")).scalars().all()
    finally:
        engine.dispose()
    assert len(ids) == 2000
    assert len(set(ids)) == 2000
    assert all(UUID.match(i) for i in ids)
