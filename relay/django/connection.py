"""Run the relay's SQLAlchemy statements on a Django connection, inside its transaction.

Every statement is still built in ``relay.store.dialects``; this module only compiles one for
the SQLAlchemy dialect that matches Django's driver (placeholders ``%s``, which every Django
backend accepts) and executes it on Django's cursor, so it shares the caller's
``transaction.atomic()`` block.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from django.db import connections
from sqlalchemy.engine import Dialect as SADialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from relay.exceptions import EventError


class Result:
    """What the producer reads back from one statement: like SQLAlchemy's ``CursorResult``."""

    def __init__(self, rows: Sequence[Sequence[Any]], rowcount: int, lastrowid: Any) -> None:
        self.rows, self.rowcount, self._lastrowid = rows, rowcount, lastrowid

    def scalar_one(self) -> Any:
        """The single value of the single row (a RETURNING or a SELECT)."""
        if len(self.rows) != 1:
            raise LookupError(f"expected one row, got {len(self.rows)}")
        return self.rows[0][0]

    @property
    def inserted_primary_key(self) -> tuple[Any]:
        """The new row's id: RETURNING where the dialect compiled one, else ``lastrowid``."""
        return (self.rows[0][0] if self.rows else self._lastrowid,)


class DjangoConnection:
    """One Django database alias seen as the small part of a SQLAlchemy ``Connection`` the
    producer uses: ``dialect`` and ``execute(statement, params)``."""

    def __init__(self, using: str) -> None:
        self.using = using
        self.django = connections[using]
        self.dialect = sqlalchemy_dialect(self.django.vendor)

    def in_atomic_block(self) -> bool:
        return bool(self.django.in_atomic_block)

    def execute(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> Result:
        """Compile ``statement`` for this database and run it with ``params`` on Django's
        cursor (so in the caller's transaction)."""
        compiled = cast(SQLCompiler, statement.compile(dialect=self.dialect))
        values = compiled.construct_params(dict(params or {})) or {}
        ordered = []
        for name in compiled.positiontup or ():
            value = values[name]
            processor = (
                compiled.binds[name].type.dialect_impl(self.dialect).bind_processor(self.dialect)
            )
            ordered.append(value if processor is None else processor(value))
        with self.django.cursor() as cursor:
            cursor.execute(compiled.string, ordered)
            rows = cursor.fetchall() if cursor.description is not None else []
            return Result(rows, cursor.rowcount, getattr(cursor, "lastrowid", None))


def sqlalchemy_dialect(vendor: str) -> SADialect:
    """The SQLAlchemy dialect matching the driver under Django's backend ``vendor``."""
    if vendor == "postgresql":
        from django.db.backends.postgresql.psycopg_any import is_psycopg3

        if is_psycopg3:
            from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

            return PGDialect_psycopg(paramstyle="format")  # type: ignore[no-untyped-call]
        from sqlalchemy.dialects.postgresql.psycopg2 import PGDialect_psycopg2

        return PGDialect_psycopg2(paramstyle="format")  # type: ignore[no-untyped-call]
    if vendor == "mysql":
        from sqlalchemy.dialects.mysql.mysqldb import MySQLDialect_mysqldb

        return MySQLDialect_mysqldb(paramstyle="format")
    if vendor == "sqlite":
        from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

        return SQLiteDialect_pysqlite(paramstyle="format")
    raise EventError(
        "using", f"is a {vendor!r} database: the relay supports postgresql, mysql and sqlite"
    )


def in_transaction(using: str, whose: str) -> DjangoConnection:
    """Django's connection ``using`` inside a ``transaction.atomic()`` block; EventError
    otherwise (autocommit would commit the event alone, before the business change)."""
    if not isinstance(using, str) or using not in connections:
        raise EventError("using", f"is not a database alias in DATABASES: {using!r}")
    conn = DjangoConnection(using)
    if not conn.in_atomic_block():
        raise EventError(
            "using",
            f"database {using!r} is in autocommit: {whose} must run inside transaction.atomic()",
        )
    return conn
