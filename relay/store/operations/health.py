"""The health store: what ``relay doctor`` and ``relay probe ready`` read of one database
(whether it answers, its schema and indexes, the server's settings and clock, the session's TLS,
a transaction pooler in front of it, the server's connections). The checks judge the readings.

Statements are the doctor's readings in ``relay.store.dialects.operations`` and, PostgreSQL's
own, in ``relay.store.dialects.postgresql.PostgresOperations``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import Engine

from relay.store import dialects
from relay.store.dialects.mysql import MySQLOperations
from relay.store.dialects.postgresql import PostgresOperations
from relay.store.engine import ping
from relay.store.transactions import BaseStore, translate_errors

#: The table where Alembic records the relay's chain (``relay/migrations/env.py``).
VERSION_TABLE = "relay_alembic_version"


@dataclass(frozen=True, slots=True)
class SessionTLS:
    """Whether a session with the server is encrypted, as the server says, and its TLS."""

    encrypted: bool
    #: The TLS version (None, or empty on MySQL, when not encrypted).
    version: str | None


@dataclass(frozen=True, slots=True)
class Autovacuum:
    """What lets autovacuum clean the outbox on PostgreSQL, each as the server spells it."""

    #: The server's ``autovacuum``.
    server: str
    #: The server's ``track_counts`` (autovacuum sees no dead rows without it).
    track_counts: str
    #: The outbox table's own ``autovacuum_enabled``; None when the table does not set it.
    outbox: str | None


@dataclass(frozen=True, slots=True)
class ServerConnections:
    """A PostgreSQL server's ``max_connections`` and its client connections open now."""

    limit: int
    open_now: int
    #: Those of relay processes over many databases (``application_name`` ``relay``).
    relay: int


class HealthStore(BaseStore):
    """Readings of one database's health, for the doctor's checks and the readiness probe."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.ops = dialects.operations_for(self.dialect)

    @property
    def url(self) -> sa.URL:
        """The database's URL, whose query holds the connection's TLS options."""
        return self.engine.url

    @property
    def backend_name(self) -> str:
        """SQLAlchemy's name of the database: ``postgresql``, ``mysql``, ``mariadb``, ``sqlite``."""
        return str(self.engine.dialect.name)

    def ping(self) -> None:
        """The database answers: DatabaseUnavailable (``database unreachable: ...``) when it
        does not, StoreError on any other database error."""
        ping(self.engine)

    def schema_revisions(self) -> tuple[str | None, str]:
        """The revision of the relay's chain applied here (None: none) and the chain's head."""
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory

        from relay.store.schema.upgrade import alembic_config

        head = ScriptDirectory.from_config(alembic_config(str(self.url))).get_current_head()
        with self._tx() as conn:
            context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            current = context.get_current_revision()
        return current, str(head)

    def missing_indexes(self) -> list[str]:
        """The names of the relay's indexes (and unique constraints) for this database that it
        does not have."""
        from relay.store.schema.tables import applies_to, metadata

        missing: list[str] = []
        with self._tx() as conn:
            inspector = sa.inspect(conn)
            for table in metadata.sorted_tables:
                present = {ix["name"] for ix in inspector.get_indexes(table.name)}
                present |= {c["name"] for c in inspector.get_unique_constraints(table.name)}
                missing += [
                    str(index.name)
                    for index in table.indexes
                    if applies_to(index, self.backend_name) and index.name not in present
                ]
        return missing

    def session_tls(self) -> SessionTLS | None:
        """Whether this session is encrypted, as the server says (``pg_stat_ssl``, MySQL's
        ``Ssl_version``); None where the database has no such reading (SQLite)."""
        ops = self.ops
        if not isinstance(ops, PostgresOperations | MySQLOperations):
            return None
        with self._tx() as conn:
            row = conn.execute(ops.connection_tls()).one_or_none()
        if isinstance(ops, PostgresOperations):
            return SessionTLS(bool(row[0]), row[1]) if row else SessionTLS(False, None)
        version = row[1] if row else None
        return SessionTLS(bool(version), version)

    def idle_in_transaction_timeout(self) -> str:
        """PostgreSQL's ``idle_in_transaction_session_timeout`` here, as ``SHOW`` gives it."""
        with self._tx() as conn:
            return str(conn.execute(self._postgres().idle_in_transaction_timeout()).scalar())

    def autovacuum(self) -> Autovacuum:
        """The server's autovacuum settings and the outbox table's own (PostgreSQL)."""
        with self._tx() as conn:
            row = conn.execute(self._postgres().autovacuum_settings()).one()
        outbox = None if row.outbox is None else str(row.outbox)
        return Autovacuum(str(row.server), str(row.track_counts), outbox)

    def clock(self) -> datetime:
        """The database's clock now, an aware UTC time."""
        with self._tx() as conn:
            now: datetime = conn.execute(self.ops.clock_reading()).scalar_one()
        return now

    def unroutable_types(self, limit: int) -> list[tuple[str, int]]:
        """Event types with rows waiting or failed as unroutable, and how many, up to
        ``limit`` types."""
        with self._tx() as conn:
            rows = conn.execute(self.ops.unroutable_types(limit)).all()
        return [(str(event_type), int(n)) for event_type, n in rows]

    def server_connections(self) -> ServerConnections:
        """The server's ``max_connections`` and the client connections open on it now
        (PostgreSQL)."""
        with self._tx() as conn:
            limit, open_now, relay = conn.execute(self._postgres().server_connections()).one()
        return ServerConnections(int(limit), int(open_now), int(relay))

    def transaction_pooled(self) -> bool:
        """Whether two transactions of one client connection ran on different server sessions
        (PostgreSQL): between them another client holds a transaction open, so a transaction
        pooler must hand the first client another server connection, while a direct or
        session-mode one cannot. Meant for a store on a ``NullPool``: both connections new."""
        pid = self._postgres().backend_pid()
        with translate_errors(), self.engine.connect() as one, self.engine.connect() as other:
            first = one.execute(pid).scalar_one()
            one.commit()
            with other.begin():
                other.execute(pid)
                second = one.execute(pid).scalar_one()
                one.commit()
        return bool(first != second)

    def _postgres(self) -> PostgresOperations:
        if not isinstance(self.ops, PostgresOperations):
            raise TypeError(f"a reading of PostgreSQL's, not of {self.dialect.name}'s")
        return self.ops


__all__ = ["Autovacuum", "HealthStore", "ServerConnections", "SessionTLS"]
