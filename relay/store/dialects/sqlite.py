"""SQLite (>= 3.35): one ``UPDATE … RETURNING`` claim inside a write transaction.

SQLite has one writer at a time, so it needs no SKIP LOCKED: the store's engine opens every
transaction with ``BEGIN IMMEDIATE`` (``relay.store.engine.create_engine``), which takes the write
lock up front and waits for it under the busy timeout, and the claim's sub-select and update
then run under that lock. Correctness does not hang on the hook: a single UPDATE statement is
serializable in SQLite anyway; without the hook a racing claimer would get "database is
locked" instead of waiting.

Times are UTC text in SQLAlchemy's layout (see ``relay.store.timestamps``), so they compare as text.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    ColumnElement,
    Float,
    LargeBinary,
    Select,
    Table,
    and_,
    bindparam,
    cast,
    func,
    literal,
    literal_column,
    type_coerce,
)
from sqlalchemy.dialects.sqlite import Insert, insert

from relay.store.dialects.returning import ReturningDialect
from relay.store.schema.tables import outbox, outbox_sequence
from relay.store.timestamps import SQLITE_FORMAT, UtcDateTime, utc_now


class SQLiteDialect(ReturningDialect):
    """SQLite >= 3.35 (``RETURNING``), one host, WAL."""

    name: ClassVar[str] = "sqlite"

    def now(self) -> ColumnElement[datetime]:
        """``strftime('%Y-%m-%d %H:%M:%f000', 'now')``: UTC, fixed for the whole statement."""
        return utc_now()

    def now_plus(self, seconds: ColumnElement[float]) -> ColumnElement[datetime]:
        """``strftime(<layout>, 'now', printf('%+.6f seconds', seconds))``."""
        return func.strftime(
            literal(SQLITE_FORMAT),
            literal_column("'now'"),
            func.printf(literal("%+.6f seconds"), seconds),
            type_=UtcDateTime(),
        )

    def seconds_since(self, column: ColumnElement[datetime]) -> ColumnElement[float]:
        """``(julianday('now') - julianday(column)) * 86400``."""
        days = func.julianday(literal_column("'now'")) - func.julianday(column)
        return type_coerce(days * literal_column("86400.0"), Float)

    def epoch_now(self) -> ColumnElement[float]:
        """``(julianday('now') - 2440587.5) * 86400``."""
        return type_coerce(literal_column("((julianday('now') - 2440587.5) * 86400.0)"), Float)

    def past_deadline(self) -> ColumnElement[bool]:
        """``julianday(expires_at) <= julianday('now')``: compared as times, not as text, so
        a deadline plain SQL wrote in another ISO 8601 layout (``2026-12-07T05:00:00Z``)
        passes when it should."""
        deadline = func.julianday(outbox.c.expires_at)
        return and_(
            outbox.c.expires_at.is_not(None), deadline <= func.julianday(literal_column("'now'"))
        )

    def text_bytes(self, text: ColumnElement[Any]) -> ColumnElement[int]:
        """``length(CAST(text AS BLOB))``: bytes, where ``length`` of text counts characters
        (``octet_length`` arrived only in SQLite 3.43)."""
        return func.length(cast(text, LargeBinary))

    def lock(self, stmt: Select[Any]) -> Select[Any]:
        """Unchanged: the transaction already holds the database's write lock."""
        return stmt

    def reserve_key(self) -> Insert:
        """``INSERT … (key, 0) ON CONFLICT DO NOTHING``: the write lock already serializes."""
        stmt = insert(outbox_sequence).values(ordering_key=bindparam("key"), last_seq=0)
        return stmt.on_conflict_do_nothing(index_elements=[outbox_sequence.c.ordering_key])

    def _insert(self, table: Table) -> Insert:
        return insert(table)

    def _greatest(self, a: ColumnElement[Any], b: ColumnElement[Any]) -> ColumnElement[Any]:
        return func.max(a, b)  # SQLite's max() of two or more arguments is the larger
