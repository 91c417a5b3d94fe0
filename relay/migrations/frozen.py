"""Values and columns the migrations share, frozen: a revision must mean the same whatever the
package becomes later, so these never change (a new need gets a new name)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

MYSQL = ("mysql", "mariadb")
#: The database clock as a column default, in UTC where the column holds no zone.
NOW_DEFAULT = {
    "postgresql": "now()",
    "mysql": "(UTC_TIMESTAMP(6))",
    "mariadb": "(UTC_TIMESTAMP(6))",
    "sqlite": "(strftime('%Y-%m-%d %H:%M:%f000', 'now'))",
}


def timestamp() -> sa.DateTime:
    """timestamptz on PostgreSQL, DATETIME(6) on MySQL, text on SQLite."""
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), *MYSQL)


def now_default(dialect: str) -> sa.TextClause:
    """The server default that writes the database's clock."""
    return sa.text(NOW_DEFAULT.get(dialect, "CURRENT_TIMESTAMP"))


def clock_column(name: str) -> sa.Column[datetime]:
    """A required :func:`timestamp` column that the database being migrated fills with its
    clock (:func:`now_default`) when a row leaves it out."""
    dialect = op.get_context().dialect.name
    return sa.Column(name, timestamp(), nullable=False, server_default=now_default(dialect))
