"""What the many-databases wake-up reads on a PostgreSQL server: how many rows each of its
databases has inserted so far (``pg_stat_database.tup_inserted``), on one connection for the
whole server, however many databases it holds.

A database's count moves when a session there inserted rows and reported its statistics:
PostgreSQL 15 reports at the end of a transaction when the session's last report is a second
old, otherwise within 10 s (or when the session ends). So the count says *where* to look soon,
never that nothing happened: the scheduler (:mod:`relay.runners.many.schedule`) still polls the
databases that were busy lately. Reading it touches no table a writer locks and needs no privilege.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from sqlalchemy import Engine

from relay.config.urls import first_line_redacted
from relay.exceptions import DatabaseUnavailable, StoreError
from relay.store import watchdog
from relay.store.dialects.postgresql import PostgresDialect
from relay.store.transactions import translate_errors


class ServerStats:
    """Reads the insert counts of ``names`` (databases of one server) through ``engine`` (any
    database of that server), on one autocommit connection kept between looks, so that each
    look reads fresh statistics, and replaced after an error. An engine with a watchdog
    (``abandon_calls``) bounds each look: a server that acknowledges and never answers fails
    the look as a connection fault instead of holding it for ever."""

    def __init__(self, engine: Engine, names: Sequence[str], *, written: bool = False) -> None:
        if engine.dialect.name != "postgresql":
            raise TypeError(f"server statistics are PostgreSQL's, not {engine.dialect.name}'s")
        self.engine, self.names = engine, list(names)
        pg = PostgresDialect()
        # ``written``: rows inserted, updated or deleted (any relay or writer activity).
        statement = pg.databases_written() if written else pg.databases_inserted()
        self._sql = str(statement.compile(dialect=engine.dialect))
        self._conn: Any = None

    def inserted(self) -> dict[str, int]:
        """Each named database's ``tup_inserted`` (``written``: plus updated and deleted; a
        database not found is left out)."""
        dog = watchdog.of(self.engine)
        guarded = dog.guard() if dog is not None else contextlib.nullcontext()
        with translate_errors(), self._translated(), guarded:
            if self._conn is None:
                raw = self.engine.raw_connection()
                conn = raw.driver_connection
                if conn is None:
                    raise DatabaseUnavailable("database unavailable: no connection")
                raw.detach()  # kept here for the life of the watcher, never pooled
                conn.autocommit = True
                self._conn = conn
            if dog is not None:
                dog.watch(self._conn)
            with self._conn.cursor() as cur:
                cur.execute(self._sql, {"names": self.names})
                rows = cur.fetchall()
        return {str(name): int(count) for name, count in rows}

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
        self.engine.dispose()

    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        """psycopg's errors as the relay's: the connection is dropped, the next look
        connects again."""
        try:
            yield
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            self.close()
            raise DatabaseUnavailable(f"database unavailable: {first_line_redacted(exc)}") from exc
        except psycopg.Error as exc:
            self.close()
            raise StoreError(f"database error: {first_line_redacted(exc)}") from exc


def changed(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """The databases whose count moved (or appeared) between two looks."""
    return [name for name, count in after.items() if before.get(name) != count]
