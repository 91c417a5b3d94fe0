"""Several outbox databases in one fleet: the per-database view of :class:`~relay.config.Settings`
every relay part runs on (``RELAY_DATABASES`` itself is parsed and checked in
:mod:`relay.config.database_list`, whose names this module re-exports).

Pure: no I/O, no third-party import. A deployment of one database (``RELAY_DATABASE_URL``
alone) is one database named :data:`DEFAULT_NAME`, so every caller handles a list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from relay.config.database_list import DEFAULT_NAME, VARIABLE, Database, connection_budget, parse
from relay.exceptions import ConfigError

if TYPE_CHECKING:
    from relay.config.settings import Settings


def configured(settings: Settings) -> tuple[Database, ...]:
    """The fleet's databases: ``RELAY_DATABASES``, or the one of ``RELAY_DATABASE_URL``."""
    if settings.databases is None:
        return (Database(DEFAULT_NAME, settings.database_url),)
    return parse(settings.databases)


def names(settings: Settings) -> tuple[str, ...]:
    """The databases' names, in the configured order."""
    return tuple(d.name for d in configured(settings))


def several(settings: Settings) -> bool:
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
    found = configured(settings)
    if settings.databases is None:
        return ((DEFAULT_NAME, settings),)
    alone = len(found) == 1
    return tuple((d.name, for_database(settings, d, alone=alone)) for d in found)


def budget(settings: Settings) -> tuple[int, int]:
    """``settings``' connection budget (:func:`relay.config.database_list.connection_budget`)."""
    return connection_budget(settings.max_connections, settings.max_server_connections)


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
