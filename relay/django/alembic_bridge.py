"""The relay's schema on a Django database, kept by the relay's own Alembic chain.

Each Django migration of the ``relay`` app brings the database to one Alembic revision
(``0001_relay_0011``: to ``0011``), so ``manage.py migrate`` and ``relay migrate`` share one
source of truth and one version table (``relay_alembic_version``). Alembic runs on a fresh
connection that Django's own backend opens with the alias's settings (same credentials, same
options), not on Django's connection, whose transaction Django manages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from django.db import connections
from sqlalchemy.pool import NullPool

from relay.django.connection import sqlalchemy_dialect
from relay.store.engine import create_engine
from relay.store.schema.upgrade import alembic_config

#: The relay's Alembic version table (``relay/migrations/env.py``).
VERSION_TABLE = "relay_alembic_version"

#: The Django app's label: ``manage.py migrate relay``.
APP_LABEL = "relay"


@contextmanager
def engine_for(using: str) -> Iterator[sa.Engine]:
    """A SQLAlchemy engine on database ``using``: SQLite through the relay's own engine (its
    pragmas and ``BEGIN IMMEDIATE``), a server through connections opened by the driver of
    Django's backend with the alias's own parameters (credentials, OPTIONS), never Django's
    pool or Django's connection."""
    django = connections[using]
    if django.vendor == "sqlite":
        engine = create_engine(f"sqlite:///{django.settings_dict['NAME']}", poolclass=NullPool)
    else:
        dialect = sqlalchemy_dialect(django.vendor)
        driver = dialect.driver
        if driver == "mysqldb" and django.Database.__name__ == "pymysql":
            driver = "pymysql"  # PyMySQL installed as MySQLdb (install_as_MySQLdb)
        engine = sa.create_engine(
            sa.URL.create(f"{dialect.name}+{driver}"),
            creator=lambda: django.Database.connect(**django.get_connection_params()),
            poolclass=NullPool,
        )
    try:
        yield engine
    finally:
        engine.dispose()


def head() -> str:
    """The newest revision of the relay's chain."""
    revision = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert revision is not None  # the chain ships with its revisions
    return revision


def current(using: str) -> str | None:
    """The revision database ``using`` is at (None: the relay's tables are not there)."""
    with engine_for(using) as engine, engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()


def _ancestors(revision: str) -> set[str]:
    """``revision`` and every revision below it."""
    chain = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return {r.revision for r in chain.iterate_revisions(revision, "base")}


def upgrade(using: str, target: str) -> None:
    """Bring ``using`` to Alembic revision ``target``; nothing when it is there or beyond (a
    later ``relay migrate`` went further)."""
    at = current(using)
    if at is not None and target in _ancestors(at):
        return
    with engine_for(using) as engine, engine.begin() as conn:
        cfg = alembic_config("sqlite://")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, target)


def downgrade(using: str, target: str) -> None:
    """Take ``using`` down to Alembic revision ``target`` (``base``: drop the relay's tables)."""
    with engine_for(using) as engine, engine.begin() as conn:
        cfg = alembic_config("sqlite://")
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, target)


def operation(target: str, previous: str) -> tuple[Callable[..., None], Callable[..., None]]:
    """The forward and backward functions of the Django migration that brings the schema to
    Alembic revision ``target`` from ``previous``, for ``migrations.RunPython``."""

    def forwards(apps: Any, schema_editor: Any) -> None:
        upgrade(schema_editor.connection.alias, target)

    def backwards(apps: Any, schema_editor: Any) -> None:
        downgrade(schema_editor.connection.alias, previous)

    return forwards, backwards


def known_revisions() -> set[str]:
    """Every revision of the relay's chain."""
    return _ancestors(head())
