"""``RELAY_DATABASES`` (``name=URL`` pairs) parsed and checked, knowing nothing of
:class:`~relay.config.Settings` (which calls :func:`check` when it is built);
:mod:`relay.config.databases` gives the per-database view of the settings.

Pure: no I/O, no third-party import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from relay.config.env import check as _check
from relay.config.urls import redact
from relay.exceptions import ConfigError

VARIABLE = "RELAY_DATABASES"
#: The name of the one database of a deployment configured by ``RELAY_DATABASE_URL`` alone.
DEFAULT_NAME = "default"
#: A database's name: a metric label, a Celery task argument, a ``--source`` value and a path
#: segment of its CloudEvents source, so it is kept plain.
NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")
# An entry starts after a comma followed by ``word=``; a comma inside a URL's query that is
# followed by ``key=`` must be written %2C.
_ENTRY_START = re.compile(r",\s*(?=[^,=/:\s]*\s*=)")


@dataclass(frozen=True, slots=True)
class Database:
    """One outbox database of the fleet: its name and its SQLAlchemy URL."""

    name: str
    url: str

    def __repr__(self) -> str:  # the URL may carry a password
        return f"Database({self.name!r}, {redact(self.url)!r})"


def parse(raw: str) -> tuple[Database, ...]:
    """``orders=postgresql+psycopg://...,billing=mysql+pymysql://...`` as :class:`Database`
    records, in the order given; a malformed entry, a bad name or a duplicate name or URL is
    refused naming ``RELAY_DATABASES`` (never echoing a password)."""
    entries = [e.strip() for e in _ENTRY_START.split(raw.strip())]
    found: list[Database] = []
    for entry in entries:
        name, sep, url = (part.strip() for part in entry.partition("="))
        _check(
            bool(sep) and bool(url),
            VARIABLE,
            redact(entry),
            "is not a name=URL pair (expected orders=postgresql+psycopg://...,billing=...)",
        )
        _check(
            NAME.fullmatch(name) is not None,
            VARIABLE,
            redact(entry),
            f"has a bad name {name!r} (lower-case letters, digits, - and _, starting with a "
            "letter, at most 40 characters)",
        )
        _check("://" in url, VARIABLE, redact(entry), "is not a URL (expected scheme://...)")
        for seen in found:
            _check(seen.name != name, VARIABLE, name, "is named twice")
            _check(
                seen.url != url,
                VARIABLE,
                redact(entry),
                f"names the URL of {seen.name!r} again (one database is one lease domain)",
            )
        found.append(Database(name, url))
    _check(bool(found), VARIABLE, raw, "names no database")
    return tuple(found)


def check(raw: str | None, database_url: str, database_url_set: bool) -> None:
    """Refuse a malformed ``RELAY_DATABASES``, or one beside a different ``RELAY_DATABASE_URL``:
    which one the relay drains would be a guess. The same URL in both is allowed (a shared env
    file)."""
    if raw is None:
        return
    found = parse(raw)
    if database_url_set and all(d.url != database_url for d in found):
        raise ConfigError(
            f"{VARIABLE} and RELAY_DATABASE_URL={redact(database_url)!r} are both set "
            f"and RELAY_DATABASE_URL is none of {VARIABLE}'s databases: set one or the other"
        )


__all__ = ["DEFAULT_NAME", "NAME", "VARIABLE", "Database", "check", "parse"]
