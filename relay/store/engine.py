"""Engines for the outbox database, tuned per dialect: URL normalisation (the drivers this
package installs), SQLite pragmas and ``BEGIN IMMEDIATE``, MySQL/MariaDB isolation, and
PostgreSQL connections that never prepare statements on the server.

``relay.store.dispatch_path.store`` builds its engine here; so do the migrations and the tests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine, event
from sqlalchemy import exc as sa_exc

from relay.config import timing
from relay.config.urls import first_line_redacted, normalize_url, redact
from relay.exceptions import ConfigError, DatabaseUnavailable, StoreError
from relay.store import faults, watchdog

#: PostgreSQL's ``application_name`` of the relay's connections (its dispatchers' and its
#: wake-ups', unless the URL names them itself): what ``relay doctor`` counts on each server.
APPLICATION_NAME = "relay"

#: Drivers an extra of this package installs, by module: named when the import fails.
_EXTRAS = {"pymysql": " (pip install 'celery-outbox-relay[mysql]')"}


def create_engine(
    url: str,
    *,
    variable: str = "RELAY_DATABASE_URL",
    deadlines: timing.DatabaseDeadlines | None = None,
    abandon_calls: bool = False,
    **kwargs: Any,
) -> Engine:
    """An engine for the outbox database, tuned per dialect; errors in ``url`` name
    ``variable``, the setting it came from.

    Every connection has deadlines (``deadlines``, by default those of the default lease;
    :func:`connect_deadlines`): to connect, TCP keepalives and user timeout (PostgreSQL), read
    and write timeouts (MySQL/MariaDB); a value the URL sets is kept. With ``abandon_calls`` a
    :mod:`relay.store.watchdog` abandons any store call past ``deadlines.call_seconds``. A server
    that will not take writes (SQLSTATE 25006 ...) counts as a disconnect (:mod:`relay.store.
    faults`).

    SQLite: WAL, a busy timeout, and every transaction opened with ``BEGIN IMMEDIATE`` so that
    writers queue for the lock instead of failing. MySQL/MariaDB: READ COMMITTED, so the
    claim's locking reads take no gap locks that would block producers' INSERTs.
    PostgreSQL (psycopg): no server-side prepared statements (:data:`PSYCOPG_CONNECT_ARGS`).
    """
    url = normalize_url(url)
    deadlines = deadlines or timing.database_deadlines()
    options: dict[str, Any] = {"json_deserializer": json_loads}
    if url.startswith("sqlite"):
        options["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_SECONDS}
    else:
        if url.startswith(("mysql", "mariadb")):
            options["isolation_level"] = "READ COMMITTED"
        ours = connect_deadlines(url, deadlines, calls=abandon_calls)
        if url.startswith("postgresql+psycopg:"):
            ours = {**PSYCOPG_CONNECT_ARGS, **ours}
        # Merged under the caller's own connect_args, which may still choose to prepare.
        kwargs = {**kwargs, "connect_args": {**ours, **kwargs.get("connect_args", {})}}
        if "poolclass" not in kwargs:
            # The connection used last is handed out first: one that sat longer is pinged
            # (_ping_when_idle), and a pool taken in turns would ping at every checkout.
            options["pool_use_lifo"] = True
    options.update(kwargs)
    try:
        engine = sa.create_engine(url, **options)
    except (sa_exc.ArgumentError, ValueError) as exc:
        # The URL does not parse (a port that is not a number, an unknown dialect): the
        # setting is wrong, and saying so beats a traceback.
        raise ConfigError(f"{variable}={redact(url)!r}: {redact(str(exc))}") from exc
    except ImportError as exc:
        hint = _EXTRAS.get(getattr(exc, "name", None) or "", "")
        raise StoreError(f"{variable}={redact(url)!r}: {exc}{hint}") from exc
    if engine.dialect.name == "postgresql":
        _check_host_list(engine.url, variable)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_begin_immediate)
    faults.install(engine)
    if abandon_calls and engine.dialect.name != "sqlite":
        watchdog.install(engine, deadlines.call_seconds)
    if "pool_pre_ping" not in kwargs:
        _ping_when_idle(engine, PING_AFTER_IDLE_SECONDS)
    return engine


#: A pooled connection is pinged before it is handed out only when it sat in the pool this
#: long: one that was used a moment ago is handed out as it is.
PING_AFTER_IDLE_SECONDS = 2.0
_IDLE_SINCE = "relay_idle_since"


def _ping_when_idle(engine: Engine, after: float) -> None:
    """SQLAlchemy's pre-ping, for connections that sat in the pool ``after`` seconds or more.

    A pre-ping at every checkout is a round trip and, on PostgreSQL, a transaction of its own
    (the empty statement counts in ``pg_stat_database``): it doubled the transactions of every
    claim, outcome and idle tick. It is an optimisation, not a guarantee (a server can die
    between the ping and the statement, which every caller already survives: a claim fails
    untouched and is tried again, an outcome is recorded again on a new connection), so a
    connection used within ``after`` seconds is trusted; a dead one is found by its statement
    instead, which invalidates the pool as a failed ping would."""

    def checkin(dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    def checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.pop(_IDLE_SINCE, None)
        if since is None or time.monotonic() - since < after:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:  # any failure: the pool drops it and checks out another
            raise sa_exc.DisconnectionError(f"ping failed: {exc}") from exc
        if not alive:
            raise sa_exc.DisconnectionError("ping failed")

    event.listen(engine, "checkin", checkin)
    event.listen(engine, "checkout", checkout)


def _check_host_list(url: sa.URL, variable: str) -> None:
    """Refuse ``?host=a:5432,b:5433``: SQLAlchemy splits it at the colon and hands libpq a port
    of ``,``, which fails at every connection, for ever, with a message about integers."""
    hosts = url.query.get("host")
    if isinstance(hosts, str) and "," in hosts and ":" in hosts:
        raise ConfigError(
            f"{variable}={redact(url.render_as_string(hide_password=True))!r}: a host list with "
            "ports is written ?host=a:5432&host=b:5432 (or ?host=a,b&port=5432,5432)"
        )


def connect_deadlines(
    url: str, deadlines: timing.DatabaseDeadlines, *, calls: bool = False
) -> dict[str, Any]:
    """The driver's connection arguments for ``deadlines``, leaving out any the URL sets (the
    URL's query becomes connection arguments too, and the dialect lets ours win over it).

    psycopg (libpq): ``connect_timeout``, keepalives, ``tcp_user_timeout`` (ms: data the peer
    does not acknowledge for that long breaks the connection; a long statement sends none, so
    an operator's purge is not cut). PyMySQL: a connect timeout, and with ``calls`` (the
    dispatch path, whose calls are short) read and write timeouts, which bound every call."""
    d = deadlines
    if url.startswith("postgresql+psycopg"):
        wanted: dict[str, Any] = {
            "connect_timeout": d.connect_seconds,
            "keepalives": 1,
            "keepalives_idle": d.keepalive_idle_seconds,
            "keepalives_interval": d.keepalive_interval_seconds,
            "keepalives_count": d.keepalive_count,
            "tcp_user_timeout": int(d.call_seconds * 1000),
        }
    elif url.startswith(("mysql+pymysql", "mariadb+pymysql")):
        wanted = {"connect_timeout": d.connect_seconds}
        if calls:
            wanted.update(read_timeout=d.call_seconds, write_timeout=d.call_seconds)
    else:
        return {}
    try:
        given = set(sa.make_url(url).query)
    except (sa_exc.ArgumentError, ValueError):
        return wanted  # create_engine names the bad URL
    return {k: v for k, v in wanted.items() if k not in given}


#: psycopg prepares a statement on the server after its fifth execution on a connection and
#: then runs it by name; behind a pooler in transaction mode (PgBouncer) the next transaction
#: may run on another server connection, which has no such statement ("prepared statement
#: \"_pg3_0\" does not exist", issue 28). Never preparing costs the direct claim + mark path
#: little (docs/benchmarks.md, "Prepared statements"), and needs no detection that could guess
#: wrong.
PSYCOPG_CONNECT_ARGS: dict[str, Any] = {"prepare_threshold": None}

_DECODER = json.JSONDecoder()


def ping(engine: Engine) -> None:
    """The database answers ``SELECT 1``: DatabaseUnavailable (``database unreachable: ...``)
    when it does not, StoreError on any other database error."""
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa_exc.SQLAlchemyError as exc:
        if faults.is_unavailable(exc):
            raise DatabaseUnavailable(f"database unreachable: {first_line_redacted(exc)}") from exc
        raise StoreError(f"database error: {first_line_redacted(exc)}") from exc


def json_loads(data: str | bytes) -> Any:
    """``json.loads`` without its per-call set-up (finding the encoding of bytes, building the
    call): the database hands JSON columns over as UTF-8. Every claimed row decodes two of
    them, payload and headers (the store, from the claim's text): 9 + 4.5 µs with
    ``json.loads``, 5.7 + 2 µs this way, as a loader psycopg calls back; 2 + 1 from text."""
    return _DECODER.decode(data if isinstance(data, str) else bytes(data).decode())


def json_loads_many(texts: Sequence[str | None]) -> list[Any]:
    """Decode many JSON texts (None: SQL NULL) in one call, as ``[json_loads(t) ...]`` would.

    A claim decodes two texts per row; joined into one JSON array they cost one pass of the C
    scanner instead of a Python call each (1.4 against 2.5 µs a row). A text that is not one
    JSON value (SQLite stores whatever plain SQL wrote) would shift the values: the count is
    checked, and on any doubt each text is decoded alone, so a bad one fails as it would."""
    joined = "[" + ",".join("null" if t is None else t for t in texts) + "]"
    try:
        values = _DECODER.decode(joined)
    except ValueError:
        values = None
    if isinstance(values, list) and len(values) == len(texts):
        return values
    return [None if t is None else json_loads(t) for t in texts]


#: How long a SQLite writer waits for the lock before "database is locked".
SQLITE_BUSY_TIMEOUT_SECONDS = 30


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    # pysqlite's own BEGIN is deferred and skipped before SELECTs; SQLAlchemy's "begin" event
    # emits ours instead (the recipe in SQLAlchemy's SQLite docs).
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_SECONDS * 1000}")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def _sqlite_begin_immediate(conn: Connection) -> None:
    # A deferred transaction that reads and then writes fails at once with SQLITE_BUSY when
    # another process wrote meanwhile (the busy timeout does not apply); taking the write lock
    # up front makes it wait its turn instead.
    conn.exec_driver_sql("BEGIN IMMEDIATE")
