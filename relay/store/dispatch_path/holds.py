"""What a claim holds back (:class:`Hold`) and the pauses in force (:class:`Pauses`), as the
dispatch store reads them from ``relay_pauses``; pure.

A held row is left where it is: ``pending``, its attempt and backoff untouched, no lease.
The claim's SQL leaves it out (``relay.store.dialects.dispatch_path.Dialect.holding``), so a
paused key's head is not claimed and the rest of its key waits behind it, in order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: ``relay_pauses.kind`` values (``relay.store.schema.tables.PAUSE_KINDS``).
EVENT_TYPE, KEY, DATABASE = "event_type", "key", "database"


def is_glob(pattern: str) -> bool:
    """Whether an event-type pattern has a wildcard (``*`` or ``?``); without, it is a name."""
    return "*" in pattern or "?" in pattern


@dataclass(frozen=True, slots=True)
class Hold:
    """Rows a claim leaves alone: event types matching any of ``types`` (globs), rows of any
    of ``keys``; with ``only``, every row whose type the glob does not match. Hashable: the
    dialects keep one built claim per hold (``relay.store.dialects.clock.cached``)."""

    types: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    only: str | None = None

    def __bool__(self) -> bool:
        return bool(self.types or self.keys or self.only is not None)

    def also(self, types: Iterable[str]) -> Hold:
        """This hold, holding back ``types`` too."""
        more = tuple(t for t in types if t not in self.types)
        return Hold(self.types + more, self.keys, self.only) if more else self


#: A claim that holds nothing back.
NO_HOLD = Hold()


@dataclass(frozen=True, slots=True)
class Pauses:
    """The pauses in force in one database: event-type patterns, keys, and whether the
    database itself is paused (its relays claim nothing)."""

    types: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    database: bool = False

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, str]]) -> Pauses:
        """From ``relay_pauses`` rows ``(kind, value)``, sorted so that the same pauses make
        the same :class:`Hold` (and reuse the same built statement)."""
        types: set[str] = set()
        keys: set[str] = set()
        database = False
        for kind, value in rows:
            if kind == EVENT_TYPE:
                types.add(value)
            elif kind == KEY:
                keys.add(value)
            elif kind == DATABASE:
                database = True
        return cls(tuple(sorted(types)), tuple(sorted(keys)), database)

    def hold(self) -> Hold:
        """What the claim holds back for these pauses."""
        return Hold(self.types, self.keys)


__all__ = ["NO_HOLD", "Hold", "Pauses", "is_glob"]
