"""Alembic environment for the relay's own chain; its version table is ``relay_alembic_version``
so it never collides with the application's own Alembic history in the same database."""

from __future__ import annotations

import os
from typing import Any

from alembic import context
from sqlalchemy import Connection

from relay.config.urls import normalize_url
from relay.migrations import lock_retries
from relay.migrations.online import OPTION, LockPolicy
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
        # A revision with a concurrent index build commits around it: one transaction a
        # revision, as online.
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _policy() -> LockPolicy:
    """The lock policy ``relay migrate`` asked for (``relay.store.schema.upgrade``), or the
    defaults."""
    defaults = LockPolicy()
    return LockPolicy(
        lock_timeout_ms=int(config.attributes.get("lock_timeout_ms", defaults.lock_timeout_ms)),
        max_wait_seconds=float(
            config.attributes.get("max_lock_wait_seconds", defaults.max_wait_seconds)
        ),
    )


def _extra(policy: LockPolicy | None) -> dict[str, Any]:
    """``context.configure``'s own options for the revisions (``relay.migrations.online``)."""
    return {OPTION: policy}


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        # A caller's transaction (the Django bridge): its DDL runs as it comes, no retries.
        _run(connection, None)
        return
    engine = create_engine(_url())
    with engine.connect() as conn:
        _run(conn, _policy())
    engine.dispose()


def _run(connection: Connection, policy: LockPolicy | None) -> None:
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
        transaction_per_migration=policy is not None,
        **_extra(policy),
    )
    if policy is None:
        with context.begin_transaction():
            context.run_migrations()
        return

    def migrate() -> None:
        with context.begin_transaction():
            context.run_migrations()

    lock_retries.run(connection, migrate, policy, say=lambda line: print(line, flush=True))


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
