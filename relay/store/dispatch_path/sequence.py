"""What the PostgreSQL wake-up reads (:mod:`relay.wakeup.watcher`): the last value of the
sequence that numbers ``outbox.id``, with the server's transaction horizon.

Neither touches the outbox table, its indexes or anything a writer locks: a writer pays nothing
for being watched (issue 27; the NOTIFY trigger it replaces made every notifying commit wait for
one instance-wide lock). Reading ``last_value`` needs ``SELECT`` (or ``USAGE``) on the sequence.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import TextClause

from relay.config.urls import first_line_redacted
from relay.exceptions import DatabaseUnavailable, StoreError
from relay.store import faults
from relay.store.dialects.postgresql import PostgresDialect
from relay.store.dispatch_path.store import DispatchStore
from relay.store.transactions import translate_errors


@dataclass(frozen=True, slots=True)
class SequenceLook:
    """One look: the sequence's ``last_value`` (None until first used) and ``xmin``, the
    oldest transaction still running."""

    value: int | None
    xmin: int


class SequenceReader:
    """Reads the outbox id sequence of ``store``'s database (PostgreSQL) on one autocommit
    connection of its own, kept between looks (one round trip a look; a transaction pooler
    is fine, nothing outlives a statement) and replaced after an error.

    The looks run 40 times a second for as long as the relay runs, so they go to psycopg's
    cursor directly, with each statement compiled once: through SQLAlchemy's execution a look
    cost the relay 144 µs of CPU, this way 56 µs."""

    def __init__(self, store: DispatchStore) -> None:
        if not isinstance(store.dialect, PostgresDialect):
            raise TypeError(f"the sequence wake-up is PostgreSQL's, not {store.dialect.name}'s")
        self.store, self._sql = store, store.dialect
        self._compiled: dict[str, str] = {}
        self._conn: Any = None

    def sequence(self) -> str | None:
        """The schema-qualified name of the sequence behind ``outbox.id`` (None: the column
        has none, so inserts cannot be watched)."""
        with self.store._tx() as conn:
            name = conn.execute(self._sql.id_sequence()).scalar()
        return None if name is None else str(name)

    def look(self, sequence: str) -> SequenceLook:
        """One look at ``sequence`` (a name from :meth:`sequence`)."""
        value, xmin = self._one("look", self._sql.sequence_look(), {"sequence": sequence})
        return SequenceLook(None if value is None else int(value), int(xmin))

    def horizon(self) -> int:
        """A new transaction id, taken by a statement of its own: every writer that took its
        id before has an older one."""
        return int(self._one("horizon", self._sql.new_xact_id(), {})[0])

    def cache(self, sequence: str) -> int:
        """The ``CACHE`` of ``sequence``: 1 unless someone changed it."""
        return int(self._one("cache", self._sql.sequence_cache(), {"sequence": sequence})[0])

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _one(self, name: str, stmt: TextClause, params: Mapping[str, Any]) -> tuple[Any, ...]:
        sql = self._compiled.get(name)
        if sql is None:
            sql = self._compiled[name] = str(stmt.compile(dialect=self.store.engine.dialect))
        dog = self.store.watchdog
        guarded = dog.guard() if dog is not None else contextlib.nullcontext()
        with translate_errors(), self._translated(), guarded:
            if self._conn is None:
                raw = self.store.engine.raw_connection()
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
                row = cur.fetchone()
        if row is None:
            raise StoreError(f"database error: {name} returned no row")
        return tuple(row)

    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        """psycopg's errors as the relay's (the SQLAlchemy ones, from connecting, as well):
        the connection is dropped, the next look connects again. A server that will not take
        writes (a standby after a failover: "cannot execute pg_current_xact_id() during
        recovery") is the connection's fault, as for the store; the pool's connections to it
        (the looks for rows) are replaced too."""
        try:
            yield
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            self.close()
            raise DatabaseUnavailable(f"database unavailable: {first_line_redacted(exc)}") from exc
        except psycopg.Error as exc:
            self.close()
            if not faults.is_connection_fault(exc):
                raise StoreError(f"database error: {first_line_redacted(exc)}") from exc
            self.store.engine.dispose()
            raise DatabaseUnavailable(f"database unavailable: {first_line_redacted(exc)}") from exc
        except Exception:
            self.close()
            raise
