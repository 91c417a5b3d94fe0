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

from collections.abc import Sequence

from sqlalchemy import Engine

from relay.store.dialects.postgresql import PostgresDialect
from relay.store.dispatch_path.raw_reader import RawReader


class ServerStats:
    """Reads the insert counts of ``names`` (databases of one server) through ``engine`` (any
    database of that server), on a connection of its own kept between looks
    (:class:`~relay.store.dispatch_path.raw_reader.RawReader`), so that each look reads fresh
    statistics."""

    def __init__(self, engine: Engine, names: Sequence[str], *, written: bool = False) -> None:
        if engine.dialect.name != "postgresql":
            raise TypeError(f"server statistics are PostgreSQL's, not {engine.dialect.name}'s")
        self.engine, self.names = engine, list(names)
        pg = PostgresDialect()
        # ``written``: rows inserted, updated or deleted (any relay or writer activity).
        self._raw = RawReader(engine)
        self._sql = self._raw.compile(
            pg.databases_written() if written else pg.databases_inserted()
        )

    def inserted(self) -> dict[str, int]:
        """Each named database's ``tup_inserted`` (``written``: plus updated and deleted; a
        database not found is left out)."""
        rows = self._raw.rows(self._sql, {"names": self.names})
        return {str(name): int(count) for name, count in rows}

    def close(self) -> None:
        self._raw.close()
        self.engine.dispose()


def changed(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """The databases whose count moved (or appeared) between two looks."""
    return [name for name, count in after.items() if before.get(name) != count]
