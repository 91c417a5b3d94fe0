"""The Alembic chain on every database: applies to an empty one, matches the metadata, reverses."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from relay.store.dialects import for_name
from relay.store.engine import create_engine
from relay.store.schema import upgrade
from relay.store.schema.tables import outbox
from tests.support import databases

RELAY = [sys.executable, "-c", "from relay.commands import main; raise SystemExit(main())"]


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_relay_migrate_applies_to_an_empty_database_and_matches_the_metadata(
    empty_url: str,
) -> None:
    """`relay migrate` creates the outbox on an empty database; `alembic check` then holds."""
    env = {**os.environ, "RELAY_DATABASE_URL": empty_url}
    done = subprocess.run([*RELAY, "migrate"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert {"outbox", "relay_alembic_version"} <= _tables(empty_url)
    upgrade.check(empty_url)


def test_downgrade_to_base_then_upgrade_round_trips(empty_url: str) -> None:
    """Down to base drops everything the chain made; up again yields the same, checked schema."""
    upgrade.upgrade(empty_url)
    upgrade.downgrade(empty_url, "base")
    assert "outbox" not in _tables(empty_url)
    upgrade.upgrade(empty_url)
    upgrade.check(empty_url)


def test_plain_sql_insert_with_event_type_and_payload_gets_valid_defaults(db_url: str) -> None:
    """A row written by plain SQL (any language) with only event_type and payload is a valid
    pending row, created now in database time and read back as an aware UTC timestamp."""
    engine = create_engine(db_url)
    clock = for_name(engine.dialect.name)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO outbox (event_type, payload) VALUES ('plain.sql', '{\"a\": 1}')"
                )
            )
        with engine.connect() as conn:
            now = conn.execute(sa.select(clock.now())).scalar_one()
            row = conn.execute(sa.text("SELECT id FROM outbox")).one()
            got = conn.execute(sa.select(outbox).where(outbox.c.id == row.id)).mappings().one()
    finally:
        engine.dispose()
    assert (got["status"], got["attempt"], got["payload"]) == ("pending", 0, {"a": 1})
    for column in ("created_at", "updated_at"):
        assert got[column].utcoffset() == UTC.utcoffset(None)
        assert abs((now - got[column]).total_seconds()) < 5
    assert abs((datetime.now(UTC) - got["created_at"]).total_seconds()) < 60


def _index_sql(engine: sa.Engine, name: str) -> tuple[int | None, str]:
    """(PostgreSQL oid or None, the index's CREATE statement)."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            query = "SELECT NULL, sql FROM sqlite_master WHERE type = 'index' AND name = :n"
        else:
            query = (
                "SELECT indexrelid::int, pg_get_indexdef(indexrelid) FROM pg_index"
                " WHERE indexrelid = to_regclass(:n)"
            )
        oid, sql = conn.execute(sa.text(query), {"n": name}).one()
    return oid, str(sql)


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("uq_outbox_ordering_key_seq", "seq IS NOT NULL"),
        ("ix_outbox_sent_at", "sent_at IS NOT NULL"),
    ],
)
def test_key_and_sent_indexes_cover_only_rows_with_a_value(
    empty_url: str, name: str, where: str
) -> None:
    """0008 makes both indexes partial where the database can (unkeyed rows no longer write
    entries into the key index on each claim and outcome), and 0007 gets them whole back; an
    index an operator built partial beforehand (CONCURRENTLY) is left as it is."""
    if empty_url.startswith(("mysql", "mariadb")):
        pytest.skip("MySQL/MariaDB have no partial index: both stay whole there")
    engine = create_engine(empty_url)
    try:
        upgrade.upgrade(empty_url)
        assert where.upper() in _index_sql(engine, name)[1].upper()
        upgrade.downgrade(empty_url, "0007")
        assert " WHERE " not in _index_sql(engine, name)[1].upper()
        # An operator builds the partial index by hand first; 0008 must keep it, not rebuild it.
        columns = "ordering_key, seq" if name.startswith("uq_") else "sent_at"
        unique = "UNIQUE " if name.startswith("uq_") else ""
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP INDEX {name}"))
            conn.execute(
                sa.text(f"CREATE {unique}INDEX {name} ON outbox ({columns}) WHERE {where}")
            )
        before = _index_sql(engine, name)
        upgrade.upgrade(empty_url)
        assert _index_sql(engine, name) == before
        upgrade.check(empty_url)
    finally:
        engine.dispose()


def test_the_claim_reads_one_index_per_status(empty_url: str) -> None:
    """0009 replaces ix_outbox_claimable (pending and processing rows in id order) with one
    index of pending rows and one of leases by their end, and 0008 gets the old one back; the
    two indexes an operator built beforehand (CONCURRENTLY) are kept, not rebuilt."""
    if empty_url.startswith(("mysql", "mariadb")):
        pytest.skip("MySQL/MariaDB have no partial index: ix_outbox_status_seq_id serves both")
    engine = create_engine(empty_url)
    indexes = {
        "ix_outbox_pending": "(id) WHERE status = 'pending' AND seq IS NULL",
        "ix_outbox_leases": "(locked_until) WHERE locked_until IS NOT NULL AND seq IS NULL",
    }

    def names() -> set[str]:
        return {i["name"] for i in sa.inspect(engine).get_indexes("outbox")}

    try:
        upgrade.upgrade(empty_url)
        assert set(indexes) <= names()
        assert "ix_outbox_claimable" not in names()
        for name in indexes:
            assert "SEQ IS NULL" in _index_sql(engine, name)[1].upper(), name
        upgrade.downgrade(empty_url, "0008")
        assert not set(indexes) & names()
        assert "ix_outbox_claimable" in names()
        with engine.begin() as conn:
            for name, definition in indexes.items():
                conn.execute(sa.text(f"CREATE INDEX {name} ON outbox {definition}"))
        before = {name: _index_sql(engine, name) for name in indexes}
        upgrade.upgrade(empty_url)
        assert {name: _index_sql(engine, name) for name in indexes} == before
        assert "ix_outbox_claimable" not in names()
        upgrade.check(empty_url)
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "url",
    ["postgresql://offline/relay", "mysql://offline/relay", "sqlite:///offline.sqlite3"],
)
def test_the_chain_writes_its_sql_offline(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``alembic upgrade --sql`` (a DBA applies the SQL by hand): every revision writes its
    statements without a connection, 0008's rebuild of the partial indexes included."""
    from alembic import command

    command.upgrade(upgrade.alembic_config(url), "head", sql=True)
    out = capsys.readouterr().out
    assert "CREATE TABLE outbox" in out
    if not url.startswith("mysql"):
        assert "ON outbox (sent_at) WHERE sent_at IS NOT NULL" in out


def _wakeup_objects(url: str) -> tuple[list[str], bool]:
    """The triggers on ``outbox`` (PostgreSQL's own internal ones left out) and whether the
    0011 flag sequence exists."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            triggers = conn.execute(
                sa.text(
                    "SELECT tgname FROM pg_trigger WHERE tgrelid = 'outbox'::regclass "
                    "AND NOT tgisinternal ORDER BY tgname"
                )
            ).scalars()
            flag = conn.execute(sa.text("SELECT to_regclass('relay_wakeup') IS NOT NULL"))
            return list(triggers), bool(flag.scalar_one())
    finally:
        engine.dispose()


def test_0014_drops_the_notify_trigger_and_its_flag_and_gives_them_back(
    backend_pool: databases.BackendPool,
) -> None:
    """PostgreSQL: up to 0014 the NOTIFY trigger and its flag go (writers pay nothing for the
    wake-up), only the keyed numbering's trigger stays; down to 0013 both come back as 0011
    left them; up again and the schema is checked."""
    with backend_pool.database("postgresql", migrated=False) as url:
        upgrade.upgrade(url, "0013")
        assert _wakeup_objects(url) == (["relay_outbox_notify", "relay_outbox_seq"], True)
        upgrade.upgrade(url)
        assert _wakeup_objects(url) == (["relay_outbox_seq"], False)
        upgrade.downgrade(url, "0013")
        assert _wakeup_objects(url) == (["relay_outbox_notify", "relay_outbox_seq"], True)
        upgrade.upgrade(url)
        upgrade.check(url)
