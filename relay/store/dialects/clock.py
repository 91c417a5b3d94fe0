"""What every builder module shares: the database clock, statuses as literals, the cache.

:class:`Clock` is the root of each dialect's builders (``relay.store.dialects.dispatch_path``,
``.produce``) and the operations builders borrow a dialect's clock
(``relay.store.dialects.operations``): every time a statement compares is database time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar, Concatenate, ParamSpec, TypeVar

from sqlalchemy import ColumnElement, String, literal_column

from relay.records import Status


def lit(status: Status) -> ColumnElement[str]:
    """A status as an inline SQL literal, never a bound parameter: the planner must see it to
    use the partial index (a generic prepared plan cannot match ``status = $1`` to it)."""
    return literal_column(f"'{status.value}'", String)


PENDING, PROCESSING, SENT, FAILED = (lit(s) for s in Status)


P = ParamSpec("P")
T = TypeVar("T")
D = TypeVar("D")
#: Statements one dialect keeps built (claims of a few sizes, outcomes per worker): a bound.
STATEMENT_CACHE_SIZE = 256


def cached(method: Callable[Concatenate[D, P], T]) -> Callable[Concatenate[D, P], T]:
    """Build a hot-path statement once per dialect and arguments, not once per batch.

    Building a batch's statements with SQLAlchemy (expressions, the LATERAL probe, the cache
    key) cost the relay about 2.5 ms of CPU per batch: at batches of 100, 82 -> 56 µs an event
    with this cache (one in-process drain of 20,000 rows on PostgreSQL). A statement is
    immutable once built, so one object serves every connection and thread; the values that
    vary per execution are bind parameters.
    """
    name = method.__name__

    def built(self: D, /, *args: P.args, **kwargs: P.kwargs) -> T:
        cache: dict[Any, Any] = self.__dict__.setdefault("_statements", {})
        key = (name, args, tuple(sorted(kwargs.items())))
        statement = cache.get(key)
        if statement is None:
            if len(cache) >= STATEMENT_CACHE_SIZE:
                cache.clear()
            statement = cache[key] = method(self, *args, **kwargs)
        return statement

    functools.update_wrapper(built, method)
    return built


class Clock:
    """Database time only; each dialect says how its database tells it."""

    name: ClassVar[str] = "base"

    def now(self) -> ColumnElement[datetime]:
        """The database's current time."""
        raise NotImplementedError

    def now_plus(self, seconds: ColumnElement[float]) -> ColumnElement[datetime]:
        """The database's current time plus ``seconds`` (a float expression)."""
        raise NotImplementedError

    def seconds_since(self, column: ColumnElement[datetime]) -> ColumnElement[float]:
        """Seconds between ``column`` and the database's current time."""
        raise NotImplementedError

    def epoch_now(self) -> ColumnElement[float]:
        """The database's current time in seconds since the epoch (UTC), a float."""
        raise NotImplementedError
