"""What both stores share: an engine, its dialect, short transactions and error translation.

SQLAlchemy's errors end here: a store's caller sees :class:`relay.exceptions.DatabaseUnavailable`
or :class:`relay.exceptions.StoreError`, raised ``from`` the original.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Self

import sqlalchemy as sa
from sqlalchemy import Connection, Engine
from sqlalchemy import exc as sa_exc

from relay.config.urls import first_line_redacted
from relay.exceptions import DatabaseUnavailable, StoreError
from relay.store import dialects, faults, watchdog
from relay.store.engine import create_engine


class BaseStore:
    """An engine on the outbox database and the dispatch path's dialect for it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = dialects.for_name(engine.dialect.name)
        #: Abandons calls past their deadline, on the dispatch path (None elsewhere).
        self.watchdog = watchdog.of(engine)

    @classmethod
    def from_url(cls, url: str, **engine_kwargs: Any) -> Self:
        return cls(create_engine(url, **engine_kwargs))

    def dispose(self) -> None:
        self.engine.dispose()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Connection]:
        if self.watchdog is None:
            with translate_errors(), self.engine.begin() as conn:
                yield conn
            return
        with translate_errors(), self.watchdog.guard(), self.engine.begin() as conn:
            self.watchdog.watch(conn.connection)
            yield conn


def executemany(conn: Connection, stmt: sa.Update, params: list[dict[str, Any]]) -> int:
    """Run ``stmt`` once per parameter set; how many rows changed in all."""
    # executemany's rowcount is not summed by every driver; one execute per row is exact and
    # the paths that use this (failed publishes, purged failed heads) are rare.
    if len(params) == 1:
        return conn.execute(stmt, params[0]).rowcount
    return sum(conn.execute(stmt, p).rowcount for p in params)


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """SQLAlchemy's errors as the relay's: the connection's fault (unreachable, broken, a call
    abandoned, a server that will not take writes: :func:`relay.store.faults.is_unavailable`)
    or any other database error."""
    try:
        yield
    except sa_exc.SQLAlchemyError as exc:
        raise relay_error(exc, unavailable=faults.is_unavailable(exc)) from exc


def relay_error(exc: Exception, *, unavailable: bool) -> StoreError:
    """The relay's error for a database error ``exc`` (SQLAlchemy's or the driver's):
    :class:`DatabaseUnavailable` when it is the connection's fault, its first line redacted."""
    text = first_line_redacted(exc)
    if faults.is_missing_table(getattr(exc, "orig", exc)):
        text += " (has `relay migrate` run on this database?)"
    if unavailable:
        return DatabaseUnavailable(f"database unavailable: {text}")
    return StoreError(f"database error: {text}")
