"""The wake-ups' one PostgreSQL connection (:mod:`.sequence`, :mod:`.serverstats`): psycopg's
cursor on an autocommit connection of its own, kept between looks, each look bounded by the
engine's watchdog and its errors translated as the store's.

The looks run 40 times a second for as long as the relay runs, so they skip SQLAlchemy's
execution, with each statement compiled once: through it a look cost the relay 144 µs of CPU,
this way 56 µs. Nothing outlives a statement, so a transaction pooler is fine.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
from sqlalchemy import ClauseElement, Engine

from relay.exceptions import DatabaseUnavailable
from relay.store import faults, watchdog
from relay.store.transactions import relay_error, translate_errors


class RawReader:
    """Reads ``engine``'s database (PostgreSQL) on one connection, opened at the first read and
    replaced after any error. An engine with a watchdog (``abandon_calls``) bounds each read: a
    server that acknowledges and never answers fails it as a connection fault instead of holding
    it for ever."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._watchdog = watchdog.of(engine)
        self._conn: Any = None

    def compile(self, statement: ClauseElement) -> str:
        """``statement`` as the SQL :meth:`rows` takes (compile once, read many times)."""
        return str(statement.compile(dialect=self.engine.dialect))

    def rows(self, sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """Every row ``sql`` returns."""
        dog = self._watchdog
        guarded = dog.guard() if dog is not None else contextlib.nullcontext()
        with translate_errors(), self._translated(), guarded:
            if self._conn is None:
                raw = self.engine.raw_connection()
                conn = raw.driver_connection
                if conn is None:
                    raise DatabaseUnavailable("database unavailable: no connection")
                raw.detach()  # kept here, never handed back to the pool
                conn.autocommit = True
                self._conn = conn
            if dog is not None:
                dog.watch(self._conn)
            with self._conn.cursor() as cur:
                cur.execute(sql, params)
                return list(cur.fetchall())

    def close(self) -> None:
        """Close the connection (the next read opens another)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        """psycopg's errors as the relay's (SQLAlchemy's, from connecting, as well): the
        connection is dropped, the next read connects again. A server that will not take writes
        (a standby after a failover: "cannot execute pg_current_xact_id() during recovery") is
        the connection's fault, as for the store; the engine's pooled connections to it are
        replaced too."""
        try:
            yield
        except psycopg.Error as exc:
            self.close()
            broken = isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
            refused = not broken and faults.is_connection_fault(exc)
            if refused:
                self.engine.dispose()
            raise relay_error(exc, unavailable=broken or refused) from exc
        except Exception:
            self.close()
            raise
