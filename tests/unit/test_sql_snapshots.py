"""Every SQL statement the relay runs, compiled per dialect and compared to a reviewed snapshot.

A change to a statement shows in review as a diff of ``tests/unit/snapshots/<dialect>.sql``.
Regenerate after an intended change with ``RELAY_UPDATE_SNAPSHOTS=1 pytest tests/unit``.
"""

from __future__ import annotations

import difflib
import inspect
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine.interfaces import Dialect as SADialect
from sqlalchemy.sql import ClauseElement

from relay.records import Status
from relay.store.dialects import Dialect, for_name
from relay.store.filters import EventFilter

SNAPSHOTS = Path(__file__).parent / "snapshots"
SA_DIALECTS: dict[str, SADialect] = {
    "postgresql": postgresql.dialect(),
    "mysql": mysql.dialect(),
    "sqlite": sqlite.dialect(),
}
#: Methods that are pieces of statements or run statements themselves, not statements.
NOT_STATEMENTS = {
    "now",
    "now_plus",
    "fence_params",
    "seconds_since",
    "claimable",
    "claim",
    "lease_values",
    "pending_due",
    "lease_expired",
    "due",
    "lock",
    "claim_unordered",
    "claim_columns",
    "json_text",
    "lease_ids",
    "next_seq",
    "run_params",
    "try_lock",
}


#: An operator's filter with every selector, so its SQL is in the snapshot.
OPERATOR_FILTER = EventFilter(
    statuses=(Status.FAILED,),
    ids=(7, 8),
    event_type="order.*",
    key="order-1",
    error="Unroutable",
    since=timedelta(hours=2),
    until=datetime(2026, 12, 1, tzinfo=UTC),
)


def _canned(dialect: Dialect, name: str) -> Any:
    values: dict[str, Any] = {
        "worker": "worker-1",
        "limit": 100,
        "lease_seconds": 30.0,
        "older_than_seconds": 3600.0,
        "ids": None,
        "moves": {"order-1": 7, "order-2": 3},
        "due": dialect.pending_due(),
        "locked": True,
        "f": OPERATOR_FILTER,
        "matching": dialect.matching(OPERATOR_FILTER),
        "after": 500,
        "horizon": 1000,
    }
    if name not in values:
        pytest.fail(f"add a canned value for builder parameter {name!r} to this test")
    return values[name]


def _statements(dialect: Dialect) -> dict[str, ClauseElement]:
    found: dict[str, ClauseElement] = {}
    for name, method in inspect.getmembers(dialect, inspect.ismethod):
        if name.startswith("_") or name in NOT_STATEMENTS:
            continue
        params = inspect.signature(method).parameters
        stmt = method(**{p: _canned(dialect, p) for p in params})
        assert isinstance(stmt, ClauseElement), f"{name} is not a statement builder"
        found[name] = stmt
    return found


def _render(name: str) -> str:
    dialect = for_name(name)
    parts = []
    for stmt_name, stmt in sorted(_statements(dialect).items()):
        sql = str(stmt.compile(dialect=SA_DIALECTS[name]))
        doc = (getattr(dialect, stmt_name).__doc__ or "").strip().splitlines()[0]
        lines = [line.rstrip() for line in sql.strip().splitlines()]
        parts.append(f"-- {stmt_name}: {doc}\n" + "\n".join(lines) + ";\n")
    return "\n".join(parts)


@pytest.mark.parametrize("name", sorted(SA_DIALECTS))
def test_compiled_sql_matches_the_snapshot(name: str) -> None:
    """The SQL of every builder of this dialect is exactly the reviewed snapshot."""
    rendered = _render(name)
    path = SNAPSHOTS / f"{name}.sql"
    if os.environ.get("RELAY_UPDATE_SNAPSHOTS"):
        path.write_text(rendered)
    assert path.exists(), f"no snapshot: run RELAY_UPDATE_SNAPSHOTS=1 pytest {__file__}"
    expected = path.read_text()
    diff = "\n".join(
        difflib.unified_diff(
            expected.splitlines(), rendered.splitlines(), "snapshot", "now", lineterm=""
        )
    )
    assert rendered == expected, f"SQL changed; review and regenerate:\n{diff}"


def test_every_builder_has_a_one_line_docstring() -> None:
    """Each statement builder says in one line what it is for."""
    for name in SA_DIALECTS:
        dialect = for_name(name)
        for stmt_name in _statements(dialect):
            doc = getattr(dialect, stmt_name).__doc__ or ""
            assert doc.strip(), f"{name}.{stmt_name} has no docstring"


def test_hot_path_statements_are_built_once_per_arguments() -> None:
    """A claim's and an outcome's statements are built once per dialect and arguments (no
    SQLAlchemy construction per batch), and the cache stays bounded."""
    from relay.store.dialects import base
    from relay.store.dialects.postgresql import PostgresDialect

    d = PostgresDialect()
    first = d.claim_statement(worker="w", limit=100, lease_seconds=30)
    assert d.claim_statement(worker="w", limit=100, lease_seconds=30) is first
    assert d.claim_statement(worker="w", limit=200, lease_seconds=30) is not first
    assert d.mark_sent("w") is d.mark_sent("w")
    assert d.mark_sent("w") is not d.mark_sent("v")
    assert PostgresDialect().mark_sent("w") is not d.mark_sent("w")  # per dialect instance
    for n in range(base.STATEMENT_CACHE_SIZE + 10):
        d.heads_statement(n + 1)
    assert len(d.__dict__["_statements"]) <= base.STATEMENT_CACHE_SIZE
