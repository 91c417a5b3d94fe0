"""``manage.py migrate`` runs the relay's own Alembic chain; the system check reports the schema."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from django.core.management import call_command
from django.db import connections

from relay.django import alembic_bridge, checks
from relay.store.engine import create_engine
from relay.store.schema import upgrade


def _version(url: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table(alembic_bridge.VERSION_TABLE):
                return None
            return conn.execute(sa.text("SELECT version_num FROM relay_alembic_version")).scalar()
    finally:
        engine.dispose()


def _ids() -> list[str]:
    return [message.id for message in checks.check_schema(databases=["default"])]


@pytest.mark.timeout(120)
def test_migrate_from_empty_then_relay_migrate_agrees(empty_url: str) -> None:
    """On an empty database ``migrate`` brings the relay to head; ``relay migrate`` afterwards
    has nothing to do and the schema matches the relay's metadata (``alembic check``)."""
    assert _ids() == ["relay.W001"]
    call_command("migrate", "relay", verbosity=0)
    assert _version(empty_url) == alembic_bridge.head()
    assert _ids() == []
    upgrade.upgrade(empty_url)
    upgrade.check(empty_url)
    assert _version(empty_url) == alembic_bridge.head()


@pytest.mark.timeout(120)
def test_migrate_after_relay_migrate_is_a_noop(django_db: str) -> None:
    """On a database ``relay migrate`` already brought to head, ``migrate`` succeeds, records
    the relay's migration, and changes nothing."""
    call_command("migrate", "relay", verbosity=0)
    assert _version(django_db) == alembic_bridge.head()
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT name FROM django_migrations WHERE app = 'relay' ORDER BY name")
        assert [row[0] for row in cursor.fetchall()] == [
            "0001_relay_0011",
            "0002_relay_0012",
            "0003_relay_0013",
            "0004_relay_0014",
            "0005_relay_0015",
        ]
    call_command("migrate", "relay", verbosity=0)  # and again: nothing left to apply
    upgrade.check(django_db)


@pytest.mark.timeout(120)
def test_migrate_zero_drops_the_relay_tables(django_db: str) -> None:
    """``migrate relay zero`` takes the relay's chain down to base; ``migrate`` brings it back."""
    call_command("migrate", "relay", verbosity=0)
    call_command("migrate", "relay", "zero", verbosity=0)
    assert _version(django_db) is None
    assert _ids() == ["relay.W001"]
    call_command("migrate", "relay", verbosity=0)
    assert _version(django_db) == alembic_bridge.head()


@pytest.mark.timeout(120)
def test_check_reports_an_outdated_and_an_unknown_revision(django_db: str) -> None:
    """Behind head: Warning naming the revisions with the command to run; a revision the
    relay does not know (a newer relay migrated): Error."""
    assert _ids() == []
    upgrade.downgrade(django_db, "0010")
    [behind] = checks.check_schema(databases=["default"])
    assert behind.id == "relay.W002"
    assert "0010" in behind.msg
    assert "python manage.py migrate relay --database default" in behind.hint
    engine = create_engine(django_db)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE relay_alembic_version SET version_num = 'f00d'"))
    engine.dispose()
    assert _ids() == ["relay.E001"]


def test_check_skips_databases_not_asked_about(django_db: str) -> None:
    """Like Django's database checks, nothing is queried unless databases are named."""
    assert checks.check_schema(databases=None) == []


def test_the_last_django_migration_reaches_the_alembic_head() -> None:
    """Every Alembic revision added to the chain needs its Django migration: the newest one
    of relay/django/migrations/ names the chain's head."""
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(None, ignore_no_migrations=True)
    names = sorted(name for app, name in loader.disk_migrations if app == "relay")
    assert names[-1].endswith("_relay_" + alembic_bridge.head())
