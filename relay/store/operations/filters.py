"""Which outbox rows an operator means: one filter for the CLI, the console and its API; pure.

A filter selects by ids, an event-type pattern, an ordering key, a text in the last error and
a creation-time window; an action (retry, purge) that selects nothing refuses to run unless
the operator said ``all``. The SQL it becomes lives with the statements
(``relay.store.dialects.operations.Operations.matching``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from relay.config.expiry import duration_seconds
from relay.exceptions import SelectorError
from relay.records import Status

#: The range of years a selector's times may name (its durations are at most a century:
#: ``relay.config.expiry.MAX_DURATION_SECONDS``); beyond, datetime arithmetic overflows.
MIN_YEAR, MAX_YEAR = 1970, 9998


# The parsers raise argparse's error so the CLI can use them as argument types as they are;
# the console catches the same error for its query parameters.
def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d``, ``2w`` -> seconds (the syntax of
    ``RELAY_EXPIRE_AFTER``'s durations, :func:`relay.config.expiry.duration_seconds`)."""
    try:
        return duration_seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_when(text: str) -> datetime | timedelta:
    """An ISO 8601 time (UTC unless it says otherwise) or a duration ago (``2h``)."""
    try:
        return timedelta(seconds=parse_duration(text))
    except argparse.ArgumentTypeError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is neither a time (2026-12-01T08:00) nor a duration ago (2h)"
        ) from None
    if not MIN_YEAR <= when.year <= MAX_YEAR:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a year {MIN_YEAR}..{MAX_YEAR}")
    return when if when.tzinfo else when.replace(tzinfo=datetime.now().astimezone().tzinfo)


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Rows of some statuses matching every selector given (none given: every row)."""

    statuses: tuple[Status, ...] = ()
    ids: tuple[int, ...] = ()
    #: Glob over ``event_type``: ``*`` any run of characters, ``?`` one (``order.*``).
    event_type: str | None = None
    #: The exact ordering key.
    key: str | None = None
    #: Text the last error contains, case-insensitive.
    error: str | None = None
    #: Created at or after: a time, or a duration before the database's now.
    since: datetime | timedelta | None = None
    #: Created before: a time, or a duration before the database's now.
    until: datetime | timedelta | None = None
    #: Every row of the statuses, explicitly (an action refuses an empty selector without it).
    all: bool = False

    @property
    def selects(self) -> bool:
        """Whether any selector beyond the statuses was given."""
        given = (self.event_type, self.key, self.error, self.since, self.until)
        return bool(self.ids) or any(v is not None for v in given)

    def for_action(self, verb: str) -> EventFilter:
        """This filter, checked for an action that changes rows: it must select or say all."""
        if not self.selects and not self.all:
            raise SelectorError(
                f"refusing to {verb} without a selector: give ids, a filter "
                "(event type, key, error, since, until) or all"
            )
        if self.selects and self.all:
            raise SelectorError("give either a selector or all, not both")
        return self

    def as_dict(self) -> dict[str, Any]:
        """The selectors given, as JSON values (a duration as ``"7200s"`` ago): for the audit."""
        out: dict[str, Any] = {"statuses": [s.value for s in self.statuses]}
        if self.ids:
            out["ids"] = list(self.ids)
        for name in ("event_type", "key", "error"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        for name in ("since", "until"):
            when = getattr(self, name)
            if isinstance(when, timedelta):
                out[name] = f"{when.total_seconds():g}s"
            elif when is not None:
                out[name] = when.isoformat()
        if self.all:
            out["all"] = True
        return out


def like_pattern(glob: str) -> str:
    """``order.*`` -> ``order.%`` for ``LIKE … ESCAPE '\\'`` (LIKE's own wildcards escaped)."""
    escaped = glob.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%").replace("?", "_")


__all__ = ["EventFilter", "like_pattern", "parse_duration", "parse_when"]
