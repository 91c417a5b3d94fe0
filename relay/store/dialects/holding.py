"""The conditions that leave held rows out of a claim (pauses and rate limits,
``relay.store.dispatch_path.holds.Hold``): one place for how a held type, glob or key reads in
SQL, which each dialect may bind its own way (PostgreSQL binds each list as one array)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, not_, or_

from relay.store.dispatch_path.holds import Hold, is_glob
from relay.store.operations.filters import like_pattern
from relay.store.schema.tables import outbox


class HeldRows:
    """The hold conditions of the dispatch path's statements (a mixin of the dialects)."""

    def holding(self, hold: Hold) -> tuple[ColumnElement[bool], ...]:
        """The conditions that leave out what ``hold`` holds back (none for no hold, so the
        statements of a relay without pauses are those it always ran). Names are one
        ``NOT IN``, globs one ``NOT LIKE`` each, in the syntax and translation of
        ``relay failed list --event-type``; rows without a key are never held by a key."""
        held: list[ColumnElement[bool]] = []
        names = [t for t in hold.types if not is_glob(t)]
        if names:
            held.append(self.none_of(outbox.c.event_type, names))
        globs = [like_pattern(t) for t in hold.types if is_glob(t)]
        if globs:
            held.append(self.like_none(outbox.c.event_type, globs))
        if hold.keys:
            key = outbox.c.ordering_key
            held.append(or_(key.is_(None), self.none_of(key, list(hold.keys))))
        if hold.only is not None:
            only = hold.only
            held.append(
                outbox.c.event_type.like(like_pattern(only), escape="\\")
                if is_glob(only)
                else outbox.c.event_type == only
            )
        return tuple(held)

    def none_of(self, column: ColumnElement[Any], values: list[str]) -> ColumnElement[bool]:
        """``column NOT IN (values)``."""
        return column.not_in(values)

    def like_none(self, column: ColumnElement[Any], patterns: list[str]) -> ColumnElement[bool]:
        """``column`` matches none of the LIKE ``patterns`` (escaped with a backslash)."""
        return and_(*(not_(column.like(p, escape="\\")) for p in patterns))
