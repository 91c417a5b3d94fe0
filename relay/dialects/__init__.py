"""One module per database; :func:`for_name` picks the one for an engine's dialect name."""

from __future__ import annotations

from relay.dialects.base import Dialect
from relay.exceptions import ConfigError


def for_name(name: str) -> Dialect:
    """The relay dialect for a SQLAlchemy dialect name (``engine.dialect.name``)."""
    if name == "postgresql":
        from relay.dialects.postgresql import PostgresDialect

        return PostgresDialect()
    if name in ("mysql", "mariadb"):
        from relay.dialects.mysql import MySQLDialect

        return MySQLDialect()
    if name == "sqlite":
        from relay.dialects.sqlite import SQLiteDialect

        return SQLiteDialect()
    raise ConfigError(
        f"RELAY_DATABASE_URL: database {name!r} is not supported (use postgresql, mysql or sqlite)"
    )


__all__ = ["Dialect", "for_name"]
