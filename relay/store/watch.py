"""What the PostgreSQL wake-up reads (:mod:`relay.dispatch.watch`): the last value of the
sequence that numbers ``outbox.id``, with the server's transaction horizon.

Neither touches the outbox table, its indexes or anything a writer locks: a writer pays nothing
for being watched (issue 27; the NOTIFY trigger it replaces made every notifying commit wait for
one instance-wide lock). Reading ``last_value`` needs ``SELECT`` (or ``USAGE``) on the sequence.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import Connection

from relay.store.base import translate_errors
from relay.store.dialects.postgresql import PostgresDialect
from relay.store.dispatch import Store

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SequenceLook:
    """One look: the sequence's ``last_value`` (None until first used) and ``xmin``, the
    oldest transaction still running."""

    value: int | None
    xmin: int


class SequenceReader:
    """Reads the outbox id sequence of ``store``'s database (PostgreSQL) on one autocommit
    connection of its own, kept between looks (one round trip a look; a transaction pooler
    is fine, nothing outlives a statement) and replaced after an error."""

    def __init__(self, store: Store) -> None:
        if not isinstance(store.dialect, PostgresDialect):
            raise TypeError(f"the sequence wake-up is PostgreSQL's, not {store.dialect.name}'s")
        self.store, self._sql = store, store.dialect
        self._conn: Connection | None = None

    def sequence(self) -> str | None:
        """The schema-qualified name of the sequence behind ``outbox.id`` (None: the column
        has none, so inserts cannot be watched)."""
        name = self._run(lambda conn: conn.execute(self._sql.id_sequence()).scalar())
        return None if name is None else str(name)

    def look(self, sequence: str) -> SequenceLook:
        """One look at ``sequence`` (a name from :meth:`sequence`)."""
        stmt, params = self._sql.sequence_look(), {"sequence": sequence}
        row = self._run(lambda conn: conn.execute(stmt, params).one())
        value = None if row.value is None else int(row.value)
        return SequenceLook(value, int(row.xmin))

    def horizon(self) -> int:
        """A new transaction id, taken by a statement of its own: every writer that took its
        id before has an older one."""
        stmt = self._sql.new_xact_id()
        return int(self._run(lambda conn: conn.execute(stmt).scalar_one()))

    def cache(self, sequence: str) -> int:
        """The ``CACHE`` of ``sequence``: 1 unless someone changed it."""
        stmt, params = self._sql.sequence_cache(), {"sequence": sequence}
        return int(self._run(lambda conn: conn.execute(stmt, params).scalar_one()))

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _run(self, statement: Callable[[Connection], T]) -> T:
        with translate_errors():
            try:
                if self._conn is None:
                    self._conn = self.store.engine.connect().execution_options(
                        isolation_level="AUTOCOMMIT"
                    )
                return statement(self._conn)
            except Exception:
                self.close()
                raise
