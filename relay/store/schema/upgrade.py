"""Apply the relay's Alembic chain, which ships inside the package (works from a wheel): bring a
database up to a revision, write the SQL for a DBA, and read which revision a database is at."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from relay.config.urls import normalize_url
from relay.store.engine import create_engine

SCRIPT_LOCATION = "relay:migrations"
#: The chain's own version table (``relay/migrations/env.py``), apart from the application's.
VERSION_TABLE = "relay_alembic_version"


def alembic_config(
    database_url: str,
    *,
    lock_timeout_ms: int | None = None,
    max_lock_wait_seconds: float | None = None,
) -> Config:
    """An Alembic config for the relay's chain against ``database_url``; the lock bounds
    (``relay.migrations.online.LockPolicy``) when given, its defaults otherwise."""
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    # ConfigParser interpolation treats % specially; URL-encoded passwords contain it.
    cfg.set_main_option("sqlalchemy.url", normalize_url(database_url).replace("%", "%%"))
    if lock_timeout_ms is not None:
        cfg.attributes["lock_timeout_ms"] = lock_timeout_ms
    if max_lock_wait_seconds is not None:
        cfg.attributes["max_lock_wait_seconds"] = max_lock_wait_seconds
    return cfg


def upgrade(
    database_url: str,
    revision: str = "head",
    *,
    lock_timeout_ms: int | None = None,
    max_lock_wait_seconds: float | None = None,
) -> None:
    """Bring the outbox schema up to ``revision``, each DDL statement waiting for its lock at
    most ``lock_timeout_ms`` and retried within ``max_lock_wait_seconds`` in all."""
    cfg = alembic_config(
        database_url, lock_timeout_ms=lock_timeout_ms, max_lock_wait_seconds=max_lock_wait_seconds
    )
    command.upgrade(cfg, revision)


def write_sql(database_url: str, start: str | None, revision: str = "head") -> None:
    """Print the SQL that brings a database at ``start`` (None: an empty one) up to
    ``revision`` (Alembic's offline mode: nothing is connected to)."""
    target = revision if start is None else f"{start}:{revision}"
    command.upgrade(alembic_config(database_url), target, sql=True)


def downgrade(database_url: str, revision: str) -> None:
    """Take the outbox schema down to ``revision`` (``base`` drops the table)."""
    command.downgrade(alembic_config(database_url), revision)


def check(database_url: str) -> None:
    """Raise if the database's schema and ``relay.store.schema.tables`` disagree
    (``alembic check``)."""
    command.check(alembic_config(database_url))


def head() -> str:
    """The newest revision of the chain this package ships."""
    found = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert found is not None  # the chain is never empty
    return found


def known_revisions() -> set[str]:
    """Every revision of the chain this package ships."""
    chain = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return {r.revision for r in chain.walk_revisions()}


def current(database_url: str) -> str | None:
    """The revision the database is at; None when the chain never ran there."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(
                conn, opts={"version_table": VERSION_TABLE}
            ).get_current_revision()
    finally:
        engine.dispose()
