"""The ``outbox`` table as SQLAlchemy Core metadata: the target of the Alembic chain."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from relay.records import Status

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
Timestamp = DateTime(timezone=True)

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
    Column("created_at", Timestamp, nullable=False, server_default=func.now()),
    Column("updated_at", Timestamp, nullable=False, server_default=func.now()),
    Column("sent_at", Timestamp, nullable=True),
    CheckConstraint(f"status IN ({STATUSES})", name="status"),
    CheckConstraint("attempt >= 0", name="attempt"),
    sqlite_autoincrement=True,
)

#: Claimable rows are found through an index over unfinished rows only, so a claim costs the
#: same however many sent rows the table holds.
Index(
    "ix_outbox_claimable",
    outbox.c.id,
    postgresql_where=text(UNFINISHED_SQL),
    sqlite_where=text(UNFINISHED_SQL),
)

#: Finds the rows ahead of a row of the same ordering key that are not yet sent.
Index(
    "ix_outbox_ordering",
    outbox.c.ordering_key,
    outbox.c.id,
    postgresql_where=text("ordering_key IS NOT NULL AND status <> 'sent'"),
    sqlite_where=text("ordering_key IS NOT NULL AND status <> 'sent'"),
)
