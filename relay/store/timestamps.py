"""UTC timestamps that mean the same on PostgreSQL, MySQL/MariaDB and SQLite.

PostgreSQL has ``timestamptz``. MySQL's ``DATETIME(6)`` and SQLite's text hold no zone, so on
those the relay stores UTC: :class:`UtcDateTime` converts aware values to UTC on the way in and
marks them UTC on the way out, and :class:`utc_now` is the database clock in that same UTC form.
On SQLite the clock also writes SQLAlchemy's text layout (``YYYY-MM-DD HH:MM:SS.ffffff``), so
text comparisons between the clock, column defaults and Python-bound values order correctly.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Text, TypeDecorator
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import TypeEngine

#: SQLAlchemy's dialect names for the MySQL family.
MYSQL_NAMES = frozenset({"mysql", "mariadb"})
#: ``strftime`` layout matching SQLAlchemy's SQLite DateTime storage; ``%f`` is ``SS.SSS``.
SQLITE_FORMAT = "%Y-%m-%d %H:%M:%f000"
SQLITE_NOW = f"strftime('{SQLITE_FORMAT}', 'now')"
MYSQL_NOW = "UTC_TIMESTAMP(6)"


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware timestamp: ``timestamptz`` on PostgreSQL, UTC elsewhere.

    Naive values bound on MySQL or SQLite are taken to be UTC already.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name in MYSQL_NAMES:
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or dialect.name == "postgresql" or value.tzinfo is None:
            return value
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None or dialect.name == "postgresql":
            return value  # type: ignore[no-any-return]  # psycopg returns aware datetimes
        assert isinstance(value, datetime)
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class ReadTimestamp(TypeDecorator[Any]):
    """A timestamp a producer may have written, read without raising: an aware datetime, or,
    when the stored value is no time Python can hold, that value itself (a text, a number,
    bytes), or None where the database's SQL turned it into NULL
    (``Dialect.readable_time``). For a claim's ``created_at``: a row's unreadable time is that
    row's fault (``relay.records.time_fault``), never the claim's.

    SQLite keeps any value in any column (``'garbage'``, epoch seconds); MariaDB keeps zero
    dates (``0000-00-00``), which PyMySQL hands over as text; PostgreSQL keeps ``infinity``
    and years past 9999, which psycopg refuses to load (hence the SQL guard there)."""

    impl = Text
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                return value
        if isinstance(value, datetime) and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class utc_now(FunctionElement[datetime]):
    """The database's current time, in UTC where the column type has no zone.

    Usable as a ``server_default`` (the parentheses make it an expression default on MySQL
    and SQLite) and in statements.
    """

    type = UtcDateTime()
    inherit_cache = True
    name = "utc_now"


@compiles(utc_now)
def _utc_now_default(element: utc_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "CURRENT_TIMESTAMP"


@compiles(utc_now, "postgresql")
def _utc_now_postgresql(element: utc_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "now()"


@compiles(utc_now, "mysql")
@compiles(utc_now, "mariadb")
def _utc_now_mysql(element: utc_now, compiler: SQLCompiler, **kw: Any) -> str:
    # UTC_TIMESTAMP, unlike NOW(), does not depend on the session's time_zone.
    return f"({MYSQL_NOW})"


@compiles(utc_now, "sqlite")
def _utc_now_sqlite(element: utc_now, compiler: SQLCompiler, **kw: Any) -> str:
    # CURRENT_TIMESTAMP has no fraction and a different text layout than bound values.
    return f"({SQLITE_NOW})"
