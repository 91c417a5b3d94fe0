"""Which database errors are the connection's fault, not the row's, by the server's own code.

A server that will not take this session's writes is a connection fault, not a database error:
after a failover the old primary (or the DNS name or virtual IP still pointing at it) answers as
a read-only standby, and retrying on another connection, once the endpoint moves, succeeds. Such
errors arrive from the drivers under classes that do not say so (psycopg's
``ReadOnlySqlTransaction`` is an ``InternalError``; PyMySQL's 1290 too), so they are told apart
by SQLSTATE or MySQL error number, never by their message. :func:`install` makes SQLAlchemy
treat them as disconnects: the connection is discarded and the pool's other connections to that
server are replaced at their next checkout.

:func:`is_missing_table` tells a table that is not there (``relay migrate`` not run yet), for
the hint the store's errors carry; by code too, except on SQLite, which has none for it.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy import exc as sa_exc

#: PostgreSQL SQLSTATEs of a server this session cannot work on now, whatever the statement.
#: 25006 read_only_sql_transaction (a standby, or a primary demoted under us: also "cannot
#: execute pg_current_xact_id() during recovery"), 57P01 admin_shutdown, 57P02 crash_shutdown,
#: 57P03 cannot_connect_now ("the database system is starting up", "... in recovery mode").
#: 55000 ("recovery is in progress" from the WAL functions) is left out: the relay calls none of
#: those, and the same code means many things that another connection will not mend.
PG_SQLSTATES = frozenset({"25006", "57P01", "57P02", "57P03"})
#: SQLSTATE class 08: connection exceptions.
PG_SQLSTATE_CLASSES = frozenset({"08"})
#: MySQL/MariaDB error numbers of a server that will not take writes: 1290 ER_OPTION_PREVENTS_
#: STATEMENT (``--read-only``, the usual state of a replica), 1792 ER_CANT_EXECUTE_IN_READ_ONLY_
#: TRANSACTION, 1836 ER_READ_ONLY_MODE (InnoDB read-only).
MYSQL_ERRORS = frozenset({1290, 1792, 1836})


def is_connection_fault(error: BaseException | None) -> bool:
    """Whether the driver's ``error`` says the server will not take work on this connection."""
    if error is None:
        return False
    sqlstate = getattr(error, "sqlstate", None)
    if isinstance(sqlstate, str):
        return sqlstate in PG_SQLSTATES or sqlstate[:2] in PG_SQLSTATE_CLASSES
    args: tuple[Any, ...] = getattr(error, "args", ())
    return bool(args) and isinstance(args[0], int) and args[0] in MYSQL_ERRORS


#: A table that is not there: PostgreSQL's SQLSTATE 42P01 undefined_table, MySQL/MariaDB's 1146
#: ER_NO_SUCH_TABLE. SQLite gives the generic SQLITE_ERROR, so there the message tells.
PG_UNDEFINED_TABLE = "42P01"
MYSQL_NO_SUCH_TABLE = 1146


def is_missing_table(error: BaseException | None) -> bool:
    """Whether the driver's ``error`` says a table the statement names does not exist (the
    usual cause: ``relay migrate`` has not run on this database yet)."""
    if error is None:
        return False
    if getattr(error, "sqlstate", None) == PG_UNDEFINED_TABLE:
        return True
    args: tuple[Any, ...] = getattr(error, "args", ())
    if args and isinstance(args[0], int):
        return args[0] == MYSQL_NO_SUCH_TABLE
    return isinstance(error, sqlite3.OperationalError) and str(error).startswith("no such table")


def is_unavailable(exc: sa_exc.SQLAlchemyError) -> bool:
    """Whether SQLAlchemy's ``exc`` is the connection's fault: unreachable, broken, invalidated
    (a call abandoned by the watchdog among them), or a server that will not take writes."""
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.DisconnectionError):
        return True
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    return is_connection_fault(getattr(exc, "orig", None))


def install(engine: Engine) -> None:
    """Make ``engine`` treat :func:`is_connection_fault` errors as disconnects (SQLAlchemy then
    invalidates the connection and the rest of its pool)."""
    event.listen(engine, "handle_error", _on_error)


def _on_error(context: Any) -> None:
    if is_connection_fault(context.original_exception):
        context.is_disconnect = True
