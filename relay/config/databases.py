"""Several outbox databases in one fleet: the per-database view of :class:`~relay.config.Settings`
every relay part runs on (``RELAY_DATABASES`` itself is parsed and checked in
:mod:`relay.config.database_list`, whose names this module re-exports).

A runner works its databases out once, at its door: a :class:`Fleet` (each database's name,
settings, URL and server, the PostgreSQL servers a wake-up watches, the connection budget),
which it hands down to its schedule, its wake-ups and its runtimes. A deployment of one
database (``RELAY_DATABASE_URL`` alone) is one database named :data:`DEFAULT_NAME`, so every
caller handles a list.

Pure: no I/O; SQLAlchemy reads the URLs (as the engines will), imported only when a fleet is
worked out, so that importing the settings loads no database toolkit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from relay.config.database_list import DEFAULT_NAME, VARIABLE, Database, connection_budget, parse
from relay.config.urls import normalize_url, redact
from relay.exceptions import ConfigError

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from relay.config.settings import Settings

_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306}


def configured(settings: Settings) -> tuple[Database, ...]:
    """The fleet's databases: ``RELAY_DATABASES``, or the one of ``RELAY_DATABASE_URL``."""
    if settings.databases is None:
        return (Database(DEFAULT_NAME, settings.database_url),)
    return parse(settings.databases)


def names(settings: Settings) -> tuple[str, ...]:
    """The databases' names, in the configured order."""
    return tuple(d.name for d in configured(settings))


def several_databases(settings: Settings) -> bool:
    """Whether the fleet drains more than one database."""
    return settings.databases is not None and len(configured(settings)) > 1


def for_database(settings: Settings, database: Database, *, alone: bool = False) -> Settings:
    """``settings`` for one database: its URL, its own CloudEvents source (``RELAY_SOURCE``
    plus ``/<name>`` when several databases share the setting; derived from the URL when
    unset), and the defaults that derive from the URL (the tick, the wake-up) derived again."""
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
    return _each(settings, configured(settings))


def _each(settings: Settings, found: tuple[Database, ...]) -> tuple[tuple[str, Settings], ...]:
    if settings.databases is None:
        return ((DEFAULT_NAME, settings),)
    alone = len(found) == 1
    return tuple((d.name, for_database(settings, d, alone=alone)) for d in found)


def budget(settings: Settings) -> tuple[int, int]:
    """``settings``' connection budget (:func:`relay.config.database_list.connection_budget`)."""
    return connection_budget(settings.max_connections, settings.max_server_connections)


def server_of(url: URL) -> str:
    """Where a database's connections count: ``host:port`` (SQLite: the file itself)."""
    backend = url.get_backend_name()
    if backend == "sqlite":
        return f"sqlite:{url.database}"
    return f"{url.host or 'localhost'}:{url.port or _DEFAULT_PORTS.get(backend, '')}"


@dataclass(frozen=True, slots=True)
class Member:
    """One database of a :class:`Fleet`: its name, its :func:`for_database` settings, its URL
    as SQLAlchemy reads it (drivers given, :func:`~relay.config.urls.normalize_url`) and the
    server its connections count against (:func:`server_of`)."""

    name: str
    settings: Settings
    url: URL
    server: str
    #: A PostgreSQL database (whose server a wake-up can watch).
    postgresql: bool


@dataclass(frozen=True, slots=True)
class Server:
    """A PostgreSQL server of a :class:`Fleet`: its ``host:port``, the URL a look at it
    connects with (its first database's) and its databases there (database name -> the
    relay's name for it)."""

    address: str
    url: URL
    datnames: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Fleet:
    """The configured databases, worked out once at a runner's door (:meth:`from_settings`)
    and handed down: what its schedule, its wake-ups, its budget and its runtimes read, so
    that none of them works the list out again."""

    #: The process's settings (``RELAY_DATABASES`` and all).
    settings: Settings
    #: Each database, in the configured order.
    members: tuple[Member, ...]
    #: More than one database (their sources and connection use differ from one's).
    several: bool
    #: The connection budget: in all, and to one server (:func:`budget`).
    budget: tuple[int, int]
    #: Each PostgreSQL server among the databases, in the order first named.
    postgresql: tuple[Server, ...]
    #: Those a wake-up watches (``RELAY_NOTIFY`` on), and the databases that it wakes.
    watched: tuple[Server, ...]
    watched_names: frozenset[str]

    @classmethod
    def from_settings(cls, settings: Settings) -> Fleet:
        """``settings``' databases (:func:`each`), their URLs read and grouped by server."""
        variable = "RELAY_DATABASE_URL" if settings.databases is None else VARIABLE
        members = tuple(_member(name, s, variable) for name, s in each(settings))
        servers: dict[str, list[Member]] = {}
        for m in members:
            if m.postgresql:
                servers.setdefault(m.server, []).append(m)
        postgresql = tuple(
            Server(address, ms[0].url, {str(m.url.database): m.name for m in ms})
            for address, ms in servers.items()
        )
        watched = postgresql if settings.notify else ()
        return cls(
            settings,
            members,
            several=settings.databases is not None and len(members) > 1,
            budget=connection_budget(settings.max_connections, settings.max_server_connections),
            postgresql=postgresql,
            watched=watched,
            watched_names=frozenset(n for s in watched for n in s.datnames.values()),
        )


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


def _member(name: str, settings: Settings, variable: str) -> Member:
    # Imported here: the settings load without SQLAlchemy (tests/unit/test_layers.py).
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(normalize_url(settings.database_url))
    except (ArgumentError, ValueError) as exc:
        # A port that is not a number, a scheme SQLAlchemy cannot read: refused naming the
        # setting, as the engine would refuse it (relay.store.engine.create_engine).
        shown = redact(settings.database_url)
        raise ConfigError(f"{variable}={shown!r}: {redact(str(exc))}") from None
    return Member(name, settings, url, server_of(url), url.get_backend_name() == "postgresql")


def _differing(settings: Settings) -> frozenset[str]:
    return frozenset(
        f.name
        for f in fields(settings)
        if f.metadata.get("env", True) and getattr(settings, f.name) != f.default
    )


def _set(source: str | None, listen: str | None) -> frozenset[str]:
    return frozenset(n for n, v in (("source", source), ("listen_url", listen)) if v is not None)
