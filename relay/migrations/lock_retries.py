"""Run the chain's revisions under a short lock timeout, retrying a revision that could not
have its lock (``relay.migrations.online`` says why), and say who held it.

Each revision is its own transaction (``transaction_per_migration``), so a lock timeout rolls
back that revision alone; Alembic then starts again from the revision the version table
names. MariaDB commits DDL as it goes: a revision there puts the statement on ``outbox``
(the only table a live relay and the application hold) first, so a retry starts clean.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from relay.exceptions import LockWaitExceeded
from relay.migrations.online import MYSQL, LockPolicy, lock_timeout_statements
from relay.policy import Backoff

#: PostgreSQL's SQLSTATE for "lock_not_available" (a lock_timeout), MariaDB's error number for
#: a lock wait timeout (metadata locks included).
POSTGRESQL_LOCK_TIMEOUT = "55P03"
MYSQL_LOCK_WAIT_TIMEOUT = 1205
#: The table a DDL statement names, for the message only.
_ON = re.compile(r"\bON\s+\"?(\w+)", re.I)
_TABLE = re.compile(r"\b(?:TABLE|INTO|UPDATE)\s+(?:IF (?:NOT )?EXISTS\s+)?\"?(\w+)", re.I)


def is_lock_timeout(exc: DBAPIError) -> bool:
    """Whether ``exc`` is a lock that could not be had in time (by code, never by text)."""
    orig = exc.orig
    if getattr(orig, "sqlstate", None) == POSTGRESQL_LOCK_TIMEOUT:
        return True
    args: tuple[object, ...] = getattr(orig, "args", ())
    return bool(args) and args[0] == MYSQL_LOCK_WAIT_TIMEOUT


def table_of(statement: str | None) -> str:
    """The table the statement that timed out names (``outbox`` when it names none)."""
    found = _ON.search(statement or "") or _TABLE.search(statement or "")
    return found.group(1) if found else "outbox"


def holder(connection: Connection, table: str) -> str:
    """Who holds the lock the statement waited for, as an operator would want it named."""
    dialect = connection.dialect.name
    try:
        if dialect == "postgresql":
            row = connection.execute(
                sa.text(
                    "SELECT a.pid, a.state, a.application_name,"
                    " extract(epoch FROM now() - a.xact_start), left(a.query, 60)"
                    " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                    " WHERE l.relation = to_regclass(:t) AND l.granted"
                    " AND l.pid <> pg_backend_pid() ORDER BY a.xact_start LIMIT 1"
                ),
                {"t": table},
            ).first()
            connection.rollback()
            if row is None:
                return "a session that has since let go"
            pid, state, app, age, query = row
            return (
                f"pid {pid} ({app or 'no application name'}, {state},"
                f" transaction open {float(age or 0):.1f} s: {query!r})"
            )
        if dialect in MYSQL:
            row = connection.execute(
                sa.text(
                    "SELECT trx_mysql_thread_id, TIMESTAMPDIFF(SECOND, trx_started, NOW())"
                    " FROM information_schema.innodb_trx"
                    " WHERE trx_mysql_thread_id <> CONNECTION_ID()"
                    " ORDER BY trx_started LIMIT 1"
                )
            ).first()
            connection.rollback()
            if row is None:
                return "a session that has since let go"
            return f"thread {row[0]} (the oldest open transaction, open {row[1]} s)"
    except DBAPIError:
        connection.rollback()
    return "another session"


def open_transactions(connection: Connection) -> dict[tuple[int, str], tuple[int, int]] | None:
    """MariaDB/MySQL: every other open transaction, by (thread id, transaction id), with
    (thread id, seconds open); None when the migrating user may not see them
    (``information_schema.innodb_trx`` needs the ``PROCESS`` privilege): the lock wait's own
    timeout and retries are then all that keeps writers from queueing (docs/upgrading.md)."""
    try:
        rows = connection.execute(
            sa.text(
                "SELECT trx_mysql_thread_id, trx_id, TIMESTAMPDIFF(SECOND, trx_started, NOW())"
                " FROM information_schema.innodb_trx"
                " WHERE trx_mysql_thread_id <> CONNECTION_ID()"
            )
        ).all()
    except DBAPIError as exc:
        connection.rollback()
        if _not_allowed(exc):
            return None
        raise
    connection.rollback()
    return {(int(t), str(i)): (int(t), int(age or 0)) for t, i, age in rows}


#: MySQL's "Access denied; you need (at least one of) the PROCESS privilege(s)".
_SPECIFIC_ACCESS_DENIED = 1227


def _not_allowed(exc: DBAPIError) -> bool:
    """Whether the server refused the statement for a missing privilege."""
    args: tuple[object, ...] = tuple(getattr(exc.orig, "args", ()))
    return bool(args) and args[0] == _SPECIFIC_ACCESS_DENIED


def _until_first_seen_end(
    connection: Connection,
    policy: LockPolicy,
    say: Callable[[str], None],
    sleep: Callable[[float], None],
    deadline: float,
    clock: Callable[[], float],
) -> None:
    """MariaDB/MySQL, whose lock wait counts whole seconds: wait, holding no lock and so
    queueing no one, until every transaction open at the first look has ended (a writer's end
    within milliseconds, a report's when it does), so that the try's lock wait, and whoever
    queues behind it, meets only transactions begun since; give up at ``deadline``."""
    now = open_transactions(connection)
    waiting = set(now or ())
    told: int | None = None
    while now is not None:
        waiting &= set(now)
        if not waiting:
            return
        thread, seconds = max((now[k] for k in waiting), key=lambda found: found[1])
        if clock() > deadline:
            raise LockWaitExceeded(
                f"gave up after {policy.max_wait_seconds:g} s waiting for thread {thread}"
                f" (a transaction open {seconds} s) to end before altering the schema; end"
                " it, or run again with a larger --max-lock-wait"
            )
        if seconds >= 1 and thread != told:
            say(
                f"waiting for thread {thread} (a transaction open {seconds} s) to end before"
                " taking a lock on the schema"
            )
            told = thread
        sleep(policy.first_retry_seconds)
        now = open_transactions(connection)


def set_lock_timeout(connection: Connection, policy: LockPolicy) -> None:
    """Bound every statement's lock wait on this session to the policy's timeout."""
    for statement in lock_timeout_statements(connection.dialect.name, policy.lock_timeout_ms):
        connection.exec_driver_sql(statement)
    if connection.in_transaction():
        connection.commit()


def run(
    connection: Connection,
    migrate: Callable[[], None],
    policy: LockPolicy,
    say: Callable[[str], None],
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run ``migrate`` (the revisions left to apply) until it succeeds, retrying after each
    lock timeout with a growing pause, and give up past ``policy.max_wait_seconds``."""
    backoff = Backoff(policy.first_retry_seconds, policy.most_retry_seconds)
    started, retry = clock(), 0
    while True:
        if connection.dialect.name in MYSQL:
            deadline = started + policy.max_wait_seconds
            _until_first_seen_end(connection, policy, say, sleep, deadline, clock)
        # Each try: a concurrent index build cut short left its longer timeout on the session.
        set_lock_timeout(connection, policy)
        try:
            migrate()
            return
        except DBAPIError as exc:
            if not is_lock_timeout(exc):
                raise
            if connection.in_transaction():
                connection.rollback()
            table = table_of(exc.statement)
            who = holder(connection, table)
            retry += 1
            pause = backoff.next()
            waited = clock() - started
            if waited + pause > policy.max_wait_seconds:
                raise LockWaitExceeded(
                    f"gave up after {waited:.1f} s waiting for a lock on"
                    f" {table} held by {who} ({retry} tries of"
                    f" {policy.lock_timeout_ms} ms each); the revisions before this one are"
                    " applied, this one rolled back. End that transaction, or run again with"
                    " a larger --max-lock-wait"
                ) from exc
            say(f"waiting for a lock on {table} held by {who}, retry {retry} in {pause:.1f} s")
            sleep(pause)
