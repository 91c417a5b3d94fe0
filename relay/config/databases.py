"""Several outbox databases in one fleet: ``RELAY_DATABASES`` (``name=URL`` pairs) parsed and
checked, and the per-database view of :class:`~relay.config.Settings` every relay part runs on.

Pure: no I/O, no third-party import. A deployment of one database (``RELAY_DATABASE_URL``
alone) is one database named :data:`DEFAULT_NAME`, so every caller handles a list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from relay.config.env import check
from relay.config.urls import redact
from relay.exceptions import ConfigError

if TYPE_CHECKING:
    from relay.config.settings import Settings

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
        check(
            bool(sep) and bool(url),
            VARIABLE,
            redact(entry),
            "is not a name=URL pair (expected orders=postgresql+psycopg://...,billing=...)",
        )
        check(
            NAME.fullmatch(name) is not None,
            VARIABLE,
            redact(entry),
            f"has a bad name {name!r} (lower-case letters, digits, - and _, starting with a "
            "letter, at most 40 characters)",
        )
        check("://" in url, VARIABLE, redact(entry), "is not a URL (expected scheme://...)")
        for seen in found:
            check(seen.name != name, VARIABLE, name, "is named twice")
            check(
                seen.url != url,
                VARIABLE,
                redact(entry),
                f"names the URL of {seen.name!r} again (one database is one lease domain)",
            )
        found.append(Database(name, url))
    check(bool(found), VARIABLE, raw, "names no database")
    return tuple(found)


def configured(settings: Settings) -> tuple[Database, ...]:
    """The fleet's databases: ``RELAY_DATABASES``, or the one of ``RELAY_DATABASE_URL``."""
    if settings.databases is None:
        return (Database(DEFAULT_NAME, settings.database_url),)
    return parse(settings.databases)


def check_settings(settings: Settings, database_url_set: bool) -> None:
    """Refuse ``RELAY_DATABASES`` beside a different ``RELAY_DATABASE_URL``: which one the
    relay drains would be a guess. The same URL in both is allowed (a shared env file)."""
    if settings.databases is None:
        return
    found = parse(settings.databases)
    if database_url_set and all(d.url != settings.database_url for d in found):
        raise ConfigError(
            f"{VARIABLE} and RELAY_DATABASE_URL={redact(settings.database_url)!r} are both set "
            f"and RELAY_DATABASE_URL is none of {VARIABLE}'s databases: set one or the other"
        )


def names(settings: Settings) -> tuple[str, ...]:
    """The databases' names, in the configured order."""
    return tuple(d.name for d in configured(settings))


def several(settings: Settings) -> bool:
    """Whether the fleet drains more than one database."""
    return settings.databases is not None and len(configured(settings)) > 1


def for_database(settings: Settings, database: Database, *, alone: bool = False) -> Settings:
    """``settings`` for one database: its URL, its own CloudEvents source (``RELAY_SOURCE``
    plus ``/<name>`` when several databases share the setting; derived from the URL when
    unset), and the defaults that derive from the URL (the tick, NOTIFY) derived again."""
    kept: Mapping[str, Any] = {
        n: getattr(settings, n)
        for n in settings.explicit or _differing(settings)
        if n not in ("database_url", "databases", "listen_url", "source")
    }
    source = settings.source
    if source is not None and not alone:
        source = source.rstrip("/") + "/" + database.name
    listen = settings.listen_url if alone else None
    values = dict(kept, database_url=database.url, source=source, listen_url=listen)
    return type(settings)(
        **values, explicit=frozenset(kept) | {"database_url"} | _set(source, listen)
    )


def each(settings: Settings) -> tuple[tuple[str, Settings], ...]:
    """Every configured database's name and its :func:`for_database` settings."""
    found = configured(settings)
    if settings.databases is None:
        return ((DEFAULT_NAME, settings),)
    alone = len(found) == 1
    return tuple((d.name, for_database(settings, d, alone=alone)) for d in found)


def pick(settings: Settings, name: str | None, *, option: str = "--source") -> tuple[str, Settings]:
    """The one database a command acts on: ``name``, or the only one configured; several
    configured and none named is refused, naming the choices."""
    every = dict(each(settings))
    if name is None:
        if len(every) == 1:
            return next(iter(every.items()))
        raise ConfigError(
            f"{VARIABLE} configures {len(every)} databases ({', '.join(every)}): name the one "
            f"to act on with {option} NAME"
        )
    if name not in every:
        raise ConfigError(f"{option} {name!r} is not a configured database ({', '.join(every)})")
    return name, every[name]


def _differing(settings: Settings) -> frozenset[str]:
    return frozenset(
        f.name
        for f in fields(settings)
        if f.metadata.get("env", True) and getattr(settings, f.name) != f.default
    )


def _set(source: str | None, listen: str | None) -> frozenset[str]:
    return frozenset(n for n, v in (("source", source), ("listen_url", listen)) if v is not None)
