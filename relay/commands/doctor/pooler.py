"""``relay doctor``'s PostgreSQL connection checks (issues 27 and 28): whether the outbox URL
goes through a pooler in transaction mode, and whether the wake-up can watch the outbox id
sequence.

Each check is one function returning a :class:`relay.commands.Check`, so they move with
the other checks wherever those live.
"""

from __future__ import annotations

from typing import Any

import psycopg
import sqlalchemy as sa

from relay.commands.doctor.verdicts import PASS, WARN, Check
from relay.config import Settings
from relay.config.urls import redact
from relay.exceptions import ConfigError, StoreError
from relay.store.dispatch_path.sequence import SequenceReader
from relay.store.dispatch_path.store import DispatchStore
from relay.store.engine import normalize_url

#: Options of the pooler check's connections: autocommit, bounded connect, no prepared
#: statements (a transaction pooler cannot keep them).
CONNECT_OPTIONS: dict[str, Any] = {
    "autocommit": True,
    "connect_timeout": 5,
    "prepare_threshold": None,
}


def conninfo(database_url: str, variable: str = "RELAY_DATABASE_URL") -> str:
    """The libpq URI of ``database_url`` (an SQLAlchemy URL), for psycopg directly; a URL that
    does not parse is a ConfigError naming ``variable``."""
    try:
        url = sa.make_url(normalize_url(database_url)).set(drivername="postgresql")
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise ConfigError(f"{variable}={redact(database_url)!r} does not parse: {exc}") from exc
    return url.render_as_string(hide_password=False)


def _backend_pid(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    return int(row[0]) if row else 0


def transaction_pooled(database_url: str) -> bool:
    """Whether two transactions of one client connection ran on different server sessions:
    between them another client holds a transaction open, so a transaction pooler must hand
    the first client another server connection, while a direct or session-mode one cannot."""
    info = conninfo(database_url)
    with (
        psycopg.connect(info, **CONNECT_OPTIONS) as one,
        psycopg.connect(info, **CONNECT_OPTIONS) as other,
    ):
        first = _backend_pid(one)
        with other.transaction():
            _backend_pid(other)
            second = _backend_pid(one)
    return first != second


def pooler(settings: Settings) -> Check:
    """Recognise a transaction pooler on ``RELAY_DATABASE_URL`` (supported: say what it means)."""
    name = "transaction pooler"
    try:
        pooled = transaction_pooled(settings.database_url)
    except psycopg.Error as exc:
        return Check(name, WARN, f"could not tell: {redact(str(exc).strip())}")
    if not pooled:
        return Check(name, PASS, "none: one client connection, one server session")
    return Check(
        name,
        PASS,
        "RELAY_DATABASE_URL goes through a pooler in transaction mode (PgBouncer): the relay "
        "prepares no statements and keeps no session state there, and its wake-up needs none; "
        "your producers' own psycopg engines need connect_args={'prepare_threshold': None} "
        "as well",
    )


def wakeup(settings: Settings) -> Check:
    """Whether the wake-up can read the outbox id sequence, and sees every insert there."""
    name = "wake-up"
    if not settings.notified:
        return Check(name, PASS, "RELAY_NOTIFY is off: the relay polls")
    var = settings.listen_variable
    store = DispatchStore.from_url(settings.listen_connection_url, poolclass=sa.pool.NullPool)
    reader = SequenceReader(store)
    try:
        sequence = reader.sequence()
        if sequence is None:
            return Check(
                name,
                WARN,
                "outbox.id has no sequence, so nothing shows that rows were inserted: the relay "
                "polls adaptively instead",
                "let `relay migrate` create the table (id is a bigserial)",
            )
        try:
            reader.look(sequence)
        except StoreError as exc:
            return Check(
                name,
                WARN,
                f"cannot read {sequence} on {var} ({exc}): the relay polls adaptively instead",
                f"GRANT SELECT ON SEQUENCE {sequence} TO the relay's role",
            )
        cache = reader.cache(sequence)
    except StoreError as exc:
        return Check(name, WARN, f"could not tell: {exc}")
    finally:
        reader.close()
        store.dispose()
    if cache > 1:
        return Check(
            name,
            WARN,
            f"{sequence} has CACHE {cache}: an insert served from a session's cache moves "
            "nothing the relay sees, so such rows wait for the tick",
            f"ALTER SEQUENCE {sequence} CACHE 1",
        )
    every = f"{settings.poll_floor_seconds:g}s"
    return Check(
        name, PASS, f"watches {sequence} every {every} on {var}; writers run nothing for it"
    )


__all__ = ["conninfo", "pooler", "transaction_pooled", "wakeup"]
