"""The ``outbox`` table as SQLAlchemy Core metadata: the target of the Alembic chain."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Column,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.schema import SchemaItem

from relay.records import Status
from relay.timestamps import MYSQL_NAMES, UtcDateTime, utc_now

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

#: JSON everywhere, jsonb on PostgreSQL.
JsonType = JSON().with_variant(JSONB(), "postgresql")
#: SQLite only gives a never-reused id to an ``INTEGER PRIMARY KEY AUTOINCREMENT`` column.
IdType = BigInteger().with_variant(Integer(), "sqlite")
#: timestamptz on PostgreSQL, DATETIME(6) in UTC on MySQL, UTC text on SQLite; aware in Python.
Timestamp = UtcDateTime()

STATUSES = ", ".join(f"'{s.value}'" for s in Status)
UNFINISHED_SQL = "status IN ('pending', 'processing')"

outbox = Table(
    "outbox",
    metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("event_type", String(255), nullable=False),
    Column("payload", JsonType, nullable=False),
    Column("headers", JsonType, nullable=True),
    Column("ordering_key", String(255), nullable=True),
    Column("status", String(16), nullable=False, server_default=Status.PENDING.value),
    Column("attempt", Integer, nullable=False, server_default=text("0")),
    Column("next_retry_at", Timestamp, nullable=True),
    Column("locked_by", String(255), nullable=True),
    Column("locked_until", Timestamp, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("created_at", Timestamp, nullable=False, server_default=utc_now()),
    Column("updated_at", Timestamp, nullable=False, server_default=utc_now()),
    Column("sent_at", Timestamp, nullable=True),
    CheckConstraint(f"status IN ({STATUSES})", name="status"),
    CheckConstraint("attempt >= 0", name="attempt"),
    sqlite_autoincrement=True,
)

#: Partial indexes exist on PostgreSQL and SQLite only.
PARTIAL_INDEX_DIALECTS = ("postgresql", "sqlite")


def only_on(item: Index, *dialect_names: str) -> Index:
    """Create ``item`` on these databases only; ``applies_to`` tells Alembic's comparison."""
    item.info["dialects"] = frozenset(dialect_names)
    return item.ddl_if(callable_=_listed_dialect)


def _listed_dialect(ddl: Any, target: Any, bind: Any, *_: Any, dialect: Dialect, **kw: Any) -> bool:
    return applies_to(target, dialect.name)


def applies_to(item: SchemaItem, dialect_name: str) -> bool:
    """Whether ``item`` exists on a database of ``dialect_name`` (see :func:`only_on`)."""
    names = getattr(item, "info", {}).get("dialects")
    return names is None or dialect_name in names


#: Claimable rows are found through an index over unfinished rows only, so a claim costs the
#: same however many sent rows the table holds.
only_on(
    Index(
        "ix_outbox_claimable",
        outbox.c.id,
        postgresql_where=text(UNFINISHED_SQL),
        sqlite_where=text(UNFINISHED_SQL),
    ),
    *PARTIAL_INDEX_DIALECTS,
)

#: MySQL has no partial index: the claim reads one status at a time in id order from this one,
#: which skips sent rows by seeking, not scanning.
only_on(Index("ix_outbox_status_id", outbox.c.status, outbox.c.id), *sorted(MYSQL_NAMES))

#: Finds the rows ahead of a row of the same ordering key that are not yet sent (on MySQL it
#: also holds sent rows: a key's cost there grows with that key's own history).
Index(
    "ix_outbox_ordering",
    outbox.c.ordering_key,
    outbox.c.id,
    postgresql_where=text("ordering_key IS NOT NULL AND status <> 'sent'"),
    sqlite_where=text("ordering_key IS NOT NULL AND status <> 'sent'"),
)
