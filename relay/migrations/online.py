"""Migrations that never block the application's writes: how long a revision's DDL may wait
for a lock, and how the revisions build and drop indexes on a live outbox.

PostgreSQL queues lock requests: an ``ALTER TABLE outbox`` that waits behind one long
transaction (a report, an idle session in a transaction) makes every writer that comes after
it wait too, for as long as the report runs. So every revision runs with a short
``lock_timeout`` (:attr:`LockPolicy.lock_timeout_ms`): a statement that cannot have its lock
that soon gives up, its revision rolls back, and ``relay.migrations.lock_retries`` tries it
again after a pause, within :attr:`LockPolicy.max_wait_seconds` in all. A writer then waits
at most one ``lock_timeout`` behind a migration, never the report's whole length. MariaDB's
metadata locks queue the same way, but its ``lock_wait_timeout`` counts whole seconds (at
least one): there the migration first waits, queueing no one, until every transaction open
at its first look has ended (``relay.migrations.lock_retries``), so a statement waits in the
lock queue only behind transactions begun since: a writer's, which ends within milliseconds.

Indexes on the outbox are built ``CONCURRENTLY`` on PostgreSQL, outside the revision's
transaction (Alembic's ``autocommit_block``): the build waits for older transactions without
holding writers up. On MariaDB they are built ``ALGORITHM=INPLACE, LOCK=NONE``. Where the
chain runs inside a caller's transaction (the Django bridge), none of this can apply: the
revisions fall back to the plain statements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from alembic import op

#: The name under which env.py hands the policy to the revisions (``context.configure``'s
#: options); absent when the chain runs in a caller's transaction.
OPTION = "relay_lock_policy"
MYSQL = ("mysql", "mariadb")


@dataclass(frozen=True)
class LockPolicy:
    """How long one DDL statement may wait for its lock, and how long a migration may keep
    trying in all before it gives up with a message (``relay migrate --lock-timeout``,
    ``--max-lock-wait``)."""

    #: The longest one statement waits for a lock: the longest a writer waits behind it.
    lock_timeout_ms: int = 300
    #: The longest the retries of one ``relay migrate`` wait for locks in all.
    max_wait_seconds: float = 300.0
    #: The first pause before a retry; each next one doubles, up to ``most_retry_seconds``.
    first_retry_seconds: float = 0.1
    most_retry_seconds: float = 2.0


def lock_timeout_statements(dialect: str, milliseconds: float) -> list[str]:
    """The session settings that bound a statement's wait for a lock to ``milliseconds``."""
    if dialect == "postgresql":
        return [f"SET lock_timeout = {max(1, int(milliseconds))}"]
    if dialect in MYSQL:
        # Whole seconds only, and at least one: with no wait at all (0) the statement fails
        # whenever any writer's transaction is open, which on a busy outbox is nearly always.
        return [f"SET SESSION lock_wait_timeout = {max(1, int(milliseconds // 1000))}"]
    return []


def policy() -> LockPolicy | None:
    """The policy of the migration being run; None inside a caller's transaction."""
    found = op.get_context().opts.get(OPTION)
    return found if isinstance(found, LockPolicy) else None


def bound_lock_wait() -> None:
    """Bound this revision's wait for its locks even where ``relay migrate`` does not run it
    (an application's own Alembic history or Django, ``relay migrate --sql``): on PostgreSQL,
    ``SET LOCAL lock_timeout`` to the default policy's for the rest of the transaction, so an
    ``ALTER TABLE outbox`` behind one long transaction fails there instead of queueing every
    writer behind it. Under ``relay migrate`` the policy already set it (and retries)."""
    if policy() is None and op.get_context().dialect.name == "postgresql":
        op.execute(f"SET LOCAL lock_timeout = {LockPolicy().lock_timeout_ms}")


def _concurrent() -> bool:
    """Whether this revision may build and drop PostgreSQL indexes CONCURRENTLY: online, on
    PostgreSQL, with the transactions in the chain's own hands."""
    context = op.get_context()
    return context.dialect.name == "postgresql" and (policy() is not None or context.as_sql)


def _has_index(name: str, table: str) -> bool:
    """Whether ``table`` has index ``name`` (MySQL's grammar has no ``ADD INDEX IF NOT
    EXISTS``); offline nothing can be looked at, and the DBA's script creates it."""
    if op.get_context().as_sql:
        return False
    return name in {i["name"] for i in sa.inspect(op.get_bind()).get_indexes(table)}


def _where(where: str | None) -> dict[str, Any]:
    rows = None if where is None else sa.text(where)
    return {"postgresql_where": rows, "sqlite_where": rows}


def _drop_invalid(name: str) -> None:
    """A concurrent build that failed (a lock timeout, a cancel) leaves an invalid index
    behind, which ``IF NOT EXISTS`` would take for a finished one: drop it first."""
    if op.get_context().as_sql:
        return
    invalid = op.get_bind().execute(
        sa.text("SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(:name) AND NOT indisvalid"),
        {"name": name},
    )
    if invalid.first() is not None:
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


def _waiting_for_older_transactions() -> None:
    """A concurrent build waits for every older transaction on the table but blocks no
    writer meanwhile: let it wait as long as the whole migration may."""
    found = policy()
    if found is not None:
        op.execute(f"SET lock_timeout = {int(found.max_wait_seconds * 1000)}")


def _back_to_short() -> None:
    found = policy()
    if found is not None:
        for statement in lock_timeout_statements("postgresql", found.lock_timeout_ms):
            op.execute(statement)


def create_index(
    name: str,
    columns: Sequence[str],
    *,
    where: str | None = None,
    unique: bool = False,
    table: str = "outbox",
) -> None:
    """Create index ``name`` unless it exists (an operator may have built it beforehand):
    CONCURRENTLY on PostgreSQL, in place without a lock on MariaDB, plainly elsewhere."""
    context = op.get_context()
    dialect = context.dialect.name
    if _concurrent():
        with context.autocommit_block():
            _drop_invalid(name)
            _waiting_for_older_transactions()
            op.create_index(
                name,
                table,
                list(columns),
                unique=unique,
                postgresql_concurrently=True,
                if_not_exists=True,
                **_where(where),
            )
            _back_to_short()
    elif dialect in MYSQL:
        if _has_index(name, table):
            return
        kind = "UNIQUE INDEX" if unique else "INDEX"
        op.execute(
            f"ALTER TABLE {table} ADD {kind} {name} ({', '.join(columns)}),"
            " ALGORITHM=INPLACE, LOCK=NONE"
        )
    else:
        op.create_index(
            name, table, list(columns), unique=unique, if_not_exists=True, **_where(where)
        )


def drop_index(name: str, *, table: str = "outbox") -> None:
    """Drop index ``name`` if it exists: CONCURRENTLY on PostgreSQL (a plain DROP INDEX
    takes the table's strongest lock), in place on MariaDB, plainly elsewhere."""
    context = op.get_context()
    if _concurrent():
        with context.autocommit_block():
            op.drop_index(name, table_name=table, postgresql_concurrently=True, if_exists=True)
    elif context.dialect.name in MYSQL:
        op.execute(f"ALTER TABLE {table} DROP INDEX {name}, ALGORITHM=INPLACE, LOCK=NONE")
    else:
        op.drop_index(name, table_name=table, if_exists=True)


def rename_index(old: str, new: str) -> None:
    """PostgreSQL: rename an index (a lock that writers do not wait on, since PostgreSQL 12)."""
    op.execute(f"ALTER INDEX {old} RENAME TO {new}")
