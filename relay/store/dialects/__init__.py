"""One module per database; :func:`for_name` picks the dispatch path's builders (with the
application's) for an engine's dialect name, :func:`operations_for` the operator's."""

from __future__ import annotations

import functools

from relay.exceptions import ConfigError
from relay.store.dialects.dispatch_path import Dialect
from relay.store.dialects.operations import Operations


@functools.cache
def for_name(name: str) -> Dialect:
    """The relay dialect for a SQLAlchemy dialect name (``engine.dialect.name``): one instance
    per name, shared (dialects hold no state; every ``relay.enqueue`` asks for one)."""
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


def operations_for(dialect: Dialect) -> Operations:
    """The operator's statements for the database ``dialect`` speaks to, on its clock."""
    if dialect.name == "postgresql":
        from relay.store.dialects.postgresql import PostgresOperations

        return PostgresOperations(dialect)
    if dialect.name == "mysql":
        from relay.store.dialects.mysql import MySQLOperations

        return MySQLOperations(dialect)
    return Operations(dialect)


__all__ = ["Dialect", "Operations", "for_name", "operations_for"]
