"""One module per database; :func:`for_name` picks the one for an engine's dialect name."""

from __future__ import annotations

from relay.exceptions import ConfigError
from relay.store.dialects.base import Dialect


def for_name(name: str) -> Dialect:
    """The relay dialect for a SQLAlchemy dialect name (``engine.dialect.name``)."""
    if name == "postgresql":
        from relay.store.dialects.postgresql import PostgresDialect

        return PostgresDialect()
    if name in ("mysql", "mariadb"):
        from relay.store.dialects.mysql import MySQLDialect

        return MySQLDialect()
    if name == "sqlite":
        from relay.store.dialects.sqlite import SQLiteDialect

        return SQLiteDialect()
    raise ConfigError(
        f"RELAY_DATABASE_URL: database {name!r} is not supported (use postgresql, mysql or sqlite)"
    )


__all__ = ["Dialect", "for_name"]
