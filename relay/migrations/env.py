"""Alembic environment for the relay's own chain; its version table is ``relay_alembic_version``
so it never collides with the application's own Alembic history in the same database."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import Connection

from relay.config.urls import normalize_url
from relay.store.engine import create_engine
from relay.store.schema.tables import TABLES, applies_to, metadata

VERSION_TABLE = "relay_alembic_version"

config = context.config


def _url() -> str:
    """The configured URL; without one (``migrations/alembic.ini``), ``RELAY_DATABASE_URL``."""
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("RELAY_DATABASE_URL")
    if not url:
        raise SystemExit("set RELAY_DATABASE_URL to the database to compare the schema with")
    return normalize_url(url)


def run_migrations_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(_url())
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        include_object=lambda obj, name, type_, reflected, compare_to: (
            (type_ != "table" or name in TABLES)
            # Alembic's comparison ignores ddl_if: skip indexes this database never gets.
            and (reflected or applies_to(obj, connection.dialect.name))
        ),
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
