"""Every SQL statement the relay runs, compiled per dialect and compared to a reviewed snapshot.

A change to a statement shows in review as a diff of ``tests/unit/snapshots/<dialect>.sql``.
Regenerate after an intended change with ``RELAY_UPDATE_SNAPSHOTS=1 pytest tests/unit``.
"""

from __future__ import annotations

import ast
import difflib
import importlib
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
from relay.store.dialects import Dialect, for_name, operations_for
from relay.store.dialects.keys import KeyStatements
from relay.store.dialects.levers import LeverStatements
from relay.store.dialects.purge import RetentionStatements
from relay.store.dispatch_path.holds import Hold
from relay.store.operations.filters import EventFilter

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
    "ids_params",
    "seconds_since",
    "claim",
    "lease_values",
    "pending_due",
    "lease_expired",
    "due",
    "lock",
    "claim_unordered",
    "claim_columns",
    "json_text",
    "readable_time",
    "lease_ids",
    "purge_inbox",
    "run_params",
    "try_lock",
    "epoch_now",
    "this_minute",
    "cutoff",
    "head_ids",
    "text_bytes",
    "row_bytes",
    "place",
    "within_bytes",
    "bound_params",
    "past_deadline",
    "holding",
    "none_of",
    "like_none",
    "pending_lane",
    "floor_params",
}

#: Modules outside ``relay.store.dialects`` that may still hold SQL of their own, and why.
SQL_ELSEWHERE = {
    "relay/store/schema/tables.py": "the tables' DDL (index predicates)",
    "relay/store/engine.py": "connection set-up (SQLite pragmas, BEGIN IMMEDIATE)",
    "relay/commands/demo/run.py": "the demo application's own table",
}
#: SQLAlchemy's statement constructors: calling one outside the dialects writes SQL there.
SQL_CONSTRUCTORS = {"select", "insert", "update", "delete", "text", "union_all"}
PACKAGE = Path(__file__).resolve().parents[2] / "relay"


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
        "matching": operations_for(dialect).matching(OPERATOR_FILTER),
        "after": 500,
        "delayed": True,
        "horizon": 1000,
        "expired": True,
        "sized": True,
        # The hot path's form: small rows sized where the lanes read them.
        "sized_late": False,
        "expiry": "in",
        "clear_expiry": False,
        "new_expiry": 3600.0,
        # A pause of a type, of a pattern and of a key: the conditions a held claim adds.
        "hold": Hold(types=("audit.log", "mail.*"), keys=("order-9",)),
        # A held claim reading its pending rows from the floor it learned.
        "floored": True,
    }
    if name not in values:
        pytest.fail(f"add a canned value for builder parameter {name!r} to this test")
    return values[name]


def _builders(name: str) -> list[Any]:
    """The objects whose methods build this database's statements."""
    dialect = for_name(name)
    return [
        dialect,
        operations_for(dialect),
        RetentionStatements(dialect),
        KeyStatements(dialect),
        LeverStatements(dialect),
    ]


def _statements(builders: Any) -> dict[str, tuple[ClauseElement, str]]:
    """Each builder's statement, compiled from canned arguments, and its docstring."""
    found: dict[str, tuple[ClauseElement, str]] = {}
    clock = builders if isinstance(builders, Dialect) else builders.dialect
    for name, method in inspect.getmembers(builders, inspect.ismethod):
        if name.startswith("_") or name in NOT_STATEMENTS:
            continue
        params = inspect.signature(method).parameters
        canned = {p: _canned(clock, p) for p in params}
        stmt = method(**canned)
        assert isinstance(stmt, ClauseElement), f"{name} is not a statement builder"
        found[name] = (stmt, method.__doc__ or "")
        if "expired" in params:  # the hot path's form, without the lane of expired leases
            found[f"{name}[expired=False]"] = (method(**{**canned, "expired": False}), "")
        if "sized_late" in params:  # large rows: sized after the lanes locked them
            found[f"{name}[sized_late=True]"] = (method(**{**canned, "sized_late": True}), "")
    return found


def _all_statements(name: str) -> dict[str, tuple[ClauseElement, str]]:
    found: dict[str, tuple[ClauseElement, str]] = {}
    for builders in _builders(name):
        statements = _statements(builders)
        assert not found.keys() & statements.keys(), "a builder name is used twice"
        found.update(statements)
    return found


def _render(name: str) -> str:
    parts = []
    statements = _all_statements(name)
    for stmt_name, (stmt, doc) in sorted(statements.items()):
        sql = str(stmt.compile(dialect=SA_DIALECTS[name]))
        doc = doc or statements[stmt_name.partition("[")[0]][1]
        first = doc.strip().splitlines()[0]
        lines = [line.rstrip() for line in sql.strip().splitlines()]
        parts.append(f"-- {stmt_name}: {first}\n" + "\n".join(lines) + ";\n")
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
        for stmt_name, (_, doc) in _all_statements(name).items():
            assert doc.strip() or "[" in stmt_name, f"{name}.{stmt_name} has no docstring"


def test_no_builder_escapes_the_snapshot() -> None:
    """Every builder class of the dialects is reached by the snapshot, and every method it
    leaves out is named in NOT_STATEMENTS and exists: a new statement cannot slip past."""
    reached = {type(b) for name in SA_DIALECTS for b in _builders(name)}
    for module_name in (
        "dispatch_path",
        "clock",
        "operations",
        "fenced_updates",
        "caller_transaction",
        "returning",
        "postgresql",
        "mysql",
        "sqlite",
    ):
        module = importlib.import_module(f"relay.store.dialects.{module_name}")
        for cls in vars(module).values():
            if inspect.isclass(cls) and cls.__module__ == module.__name__:
                subclass = any(issubclass(r, cls) for r in reached)
                assert subclass, f"{cls.__qualname__} builds statements no snapshot compiles"
    methods = {
        name for builders in reached for name, _ in inspect.getmembers(builders, inspect.isfunction)
    }
    assert methods >= NOT_STATEMENTS, f"stale: {sorted(NOT_STATEMENTS - methods)}"


def _sql_calls(path: Path) -> list[str]:
    """SQLAlchemy statement constructors called in ``path`` (``sa.select(...)``,
    ``select(...)`` imported from sqlalchemy) and SQL handed over as a string."""
    tree = ast.parse(path.read_text())
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy")
        for alias in node.names
        if alias.name in SQL_CONSTRUCTORS
    }
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in imported:
            calls.append(f"{f.id}() line {node.lineno}")
        elif _is_attribute(f, SQL_CONSTRUCTORS) and _names(f.value, ("sa", "sqlalchemy")):
            calls.append(f"sa.{f.attr}() line {node.lineno}")
        if _is_attribute(f, {"execute", "exec_driver_sql"}) and _literal_first(node):
            calls.append(f"SQL text line {node.lineno}")
    return calls


def _is_attribute(node: ast.expr, names: set[str]) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in names


def _names(node: ast.expr, names: tuple[str, ...]) -> bool:
    return isinstance(node, ast.Name) and node.id in names


def _literal_first(call: ast.Call) -> bool:
    return bool(call.args) and isinstance(call.args[0], ast.Constant | ast.JoinedStr)


def test_sql_is_built_only_in_the_dialects() -> None:
    """No module outside ``relay.store.dialects`` writes a statement (but those listed in
    SQL_ELSEWHERE, with the reason), so every statement the relay runs is in the snapshot."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).as_posix()
        if relative.startswith(("relay/store/dialects/", "relay/migrations/")):
            continue
        calls = _sql_calls(path)
        if calls and relative not in SQL_ELSEWHERE:
            found[relative] = calls
        elif not calls and relative in SQL_ELSEWHERE:
            found[relative] = ["listed in SQL_ELSEWHERE but writes no SQL: drop it"]
    assert found == {}


def test_hot_path_statements_are_built_once_per_arguments() -> None:
    """A claim's, an outcome's and an enqueue's statements are built once per dialect and
    arguments (no SQLAlchemy construction per batch or event), and the cache stays bounded."""
    from relay.store import dialects
    from relay.store.dialects import clock
    from relay.store.dialects.postgresql import PostgresDialect

    d = PostgresDialect()
    first = d.claim_statement(worker="w", limit=100, lease_seconds=30, expired=False)
    assert d.claim_statement(worker="w", limit=100, lease_seconds=30, expired=False) is first
    assert d.claim_statement(worker="w", limit=200, lease_seconds=30, expired=False) is not first
    assert d.claim_statement(worker="w", limit=100, lease_seconds=30, expired=True) is not first
    assert d.mark_sent("w") is d.mark_sent("w")
    assert d.mark_sent("w") is not d.mark_sent("v")
    assert PostgresDialect().mark_sent("w") is not d.mark_sent("w")  # per dialect instance
    # The producer's side: one dialect per name, one INSERT per shape (every enqueue runs it).
    assert dialects.for_name("postgresql") is dialects.for_name("postgresql")
    row = dialects.for_name("postgresql").insert_event(delayed=False)
    assert d.insert_event(delayed=False) is d.insert_event(delayed=False)
    assert dialects.for_name("postgresql").insert_event(delayed=False) is row
    assert dialects.for_name("postgresql").insert_event(delayed=True) is not row
    for n in range(clock.STATEMENT_CACHE_SIZE + 10):
        d.heads_statement(n + 1)
    assert len(d.__dict__["_statements"]) <= clock.STATEMENT_CACHE_SIZE
