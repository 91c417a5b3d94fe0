"""``RELAY_DATABASES`` (``name=URL`` pairs) parsed and checked, knowing nothing of
:class:`~relay.config.Settings` (which calls :func:`check` when it is built);
:mod:`relay.config.databases` gives the per-database view of the settings.

``RELAY_DATABASES=@PATH`` names a file that holds the list instead (one ``name=URL`` a line,
blank lines and lines starting with ``#`` ignored): read once, when first needed, and again
only after :func:`forget_files` (``relay dispatch --loop`` calls it on SIGHUP to add or drop
databases without a restart; a Celery worker when :func:`changed` says the file changed).
That file is this module's only I/O; no third-party import.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

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


_files: dict[str, str] = {}
#: Each file's identity when it was read: (modified, size, inode).
_stamps: dict[str, tuple[int, int, int] | None] = {}
_files_lock = threading.Lock()


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def text(raw: str) -> str:
    """The list ``raw`` stands for: itself, or with ``@PATH`` that file's entries joined with
    commas (read once until :func:`forget_files`); a file that cannot be read is refused naming
    ``RELAY_DATABASES`` and the path."""
    if not raw.strip().startswith("@"):
        return raw
    path = raw.strip()[1:].strip()
    with _files_lock:
        if path not in _files:
            # Stamped before the read: a write after it shows as a change next time.
            _stamps[path] = _stamp(path)
            try:
                content = Path(path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{VARIABLE}=@{path}: cannot read the file: {exc}") from None
            # A comment is a whole line: a password may hold a '#'.
            lines = (line.strip() for line in content.splitlines())
            _files[path] = ",".join(line for line in lines if line and not line.startswith("#"))
        return _files[path]


def forget_files() -> None:
    """Read every ``@PATH`` list again when next needed (the reload)."""
    with _files_lock:
        _files.clear()
        _stamps.clear()


def changed(raw: str | None) -> bool:
    """Whether ``raw`` is ``@PATH`` and that file was written, replaced or removed since it was
    read (one ``stat``); False for a list given inline or a file not read yet."""
    if raw is None or not raw.strip().startswith("@"):
        return False
    path = raw.strip()[1:].strip()
    with _files_lock:
        if path not in _files:
            return False
        return _stamps.get(path) != _stamp(path)


def parse(raw: str) -> tuple[Database, ...]:
    """``orders=postgresql+psycopg://...,billing=mysql+pymysql://...`` (or ``@PATH``, see
    :func:`text`) as :class:`Database` records, in the order given; a malformed entry, a bad
    name or a duplicate name or URL is refused naming ``RELAY_DATABASES`` (never echoing a
    password)."""
    raw = text(raw)
    _check(bool(raw.strip()), VARIABLE, raw, "names no database")
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


def connection_budget(total: int, per_server: int | None) -> tuple[int, int]:
    """The connection budget of one process over several databases: ``RELAY_MAX_CONNECTIONS``
    in all and ``RELAY_MAX_SERVER_CONNECTIONS`` per server (None: the total). Two at least:
    a PostgreSQL server's wake-up takes one, and a database needs one to be relayed."""
    if total < 2:
        raise ConfigError(f"RELAY_MAX_CONNECTIONS={total!r} must be >= 2")
    if per_server is None:
        return total, total
    if not 2 <= per_server <= total:
        raise ConfigError(
            f"RELAY_MAX_SERVER_CONNECTIONS={per_server!r} must be 2..RELAY_MAX_CONNECTIONS={total}"
        )
    return total, per_server


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


__all__ = [
    "DEFAULT_NAME",
    "NAME",
    "VARIABLE",
    "Database",
    "check",
    "connection_budget",
    "forget_files",
    "parse",
    "text",
]
