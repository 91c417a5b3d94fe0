"""What the PostgreSQL wake-up reads (:mod:`relay.wakeup.watcher`): the last value of the
sequence that numbers ``outbox.id``, with the server's transaction horizon.

Neither touches the outbox table, its indexes or anything a writer locks: a writer pays nothing
for being watched (issue 27; the NOTIFY trigger it replaces made every notifying commit wait for
one instance-wide lock). Reading ``last_value`` needs ``SELECT`` (or ``USAGE``) on the sequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from relay.exceptions import StoreError
from relay.store.dialects.postgresql import PostgresDialect
from relay.store.dispatch_path.raw_reader import RawReader
from relay.store.dispatch_path.store import DispatchStore


@dataclass(frozen=True, slots=True)
class SequenceLook:
    """One look: the sequence's ``last_value`` (None until first used) and ``xmin``, the
    oldest transaction still running."""

    value: int | None
    xmin: int


class SequenceReader:
    """Reads the outbox id sequence of ``store``'s database (PostgreSQL) on a connection of its
    own (:class:`~relay.store.dispatch_path.raw_reader.RawReader`: one round trip a look)."""

    def __init__(self, store: DispatchStore) -> None:
        if not isinstance(store.dialect, PostgresDialect):
            raise TypeError(f"the sequence wake-up is PostgreSQL's, not {store.dialect.name}'s")
        self.store, self._raw = store, RawReader(store.engine)
        sql = store.dialect
        self._look = self._raw.compile(sql.sequence_look())
        self._horizon = self._raw.compile(sql.new_xact_id())
        self._cache = self._raw.compile(sql.sequence_cache())
        self._sql = sql

    def sequence(self) -> str | None:
        """The schema-qualified name of the sequence behind ``outbox.id`` (None: the column
        has none, so inserts cannot be watched)."""
        with self.store._tx() as conn:
            name = conn.execute(self._sql.id_sequence()).scalar()
        return None if name is None else str(name)

    def look(self, sequence: str) -> SequenceLook:
        """One look at ``sequence`` (a name from :meth:`sequence`)."""
        value, xmin = self._one("look", self._look, {"sequence": sequence})
        return SequenceLook(None if value is None else int(value), int(xmin))

    def horizon(self) -> int:
        """A new transaction id, taken by a statement of its own: every writer that took its
        id before has an older one."""
        return int(self._one("horizon", self._horizon, {})[0])

    def cache(self, sequence: str) -> int:
        """The ``CACHE`` of ``sequence``: 1 unless someone changed it."""
        return int(self._one("cache", self._cache, {"sequence": sequence})[0])

    def close(self) -> None:
        self._raw.close()

    def _one(self, name: str, sql: str, params: Mapping[str, Any]) -> tuple[Any, ...]:
        rows = self._raw.rows(sql, params)
        if not rows:
            raise StoreError(f"database error: {name} returned no row")
        return tuple(rows[0])
