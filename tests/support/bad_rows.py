"""Rows that a database accepts and no message can carry, written by plain SQL as another
team's service would, each with the reason the relay must dead-letter it with."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import sqlalchemy as sa

from relay.records import Status
from relay.store.operations.filters import EventFilter
from relay.store.operations.store import OperationsStore
from tests.support.fleet import enqueue_committed


@dataclass(frozen=True)
class BadRow:
    """One kind of bad row: its payload and headers as JSON text, and the reason expected."""

    name: str
    payload: str
    headers: str | None
    #: A regular expression the row's ``last_error`` must match.
    reason: str
    #: The databases that accept it (MariaDB's JSON check refuses nesting over 32 levels and
    #: text that is not JSON; only SQLite keeps any text).
    kinds: frozenset[str] = frozenset({"postgresql", "mysql", "sqlite"})
    event_type: str = "bad.event"
    #: ``created_at`` as an SQL literal (None: the column's default).
    created_at: str | None = None


_ALL = frozenset({"postgresql", "mysql", "sqlite"})
BAD_ROWS = (
    BadRow(
        "integer-of-5001-digits",
        '{"n": 1' + "0" * 5000 + "}",
        None,
        r"^payload: an integer of 5,001 digits, more than the 4,300 Python converts",
    ),
    BadRow(
        "nested-5000-deep",
        "[" * 5000 + "]" * 5000,
        None,
        r"^payload: JSON nested deeper than the relay decodes",
        frozenset({"postgresql", "sqlite"}),
    ),
    BadRow(
        "number-out-of-range",  # PostgreSQL keeps 1e400 as a numeric of 401 digits: fine there
        '{"x": 1e400}',
        None,
        r"^unsendable: cannot be encoded: ValueError: Out of range float",
        frozenset({"mysql", "sqlite"}),
    ),
    BadRow("headers-array", '{"n": 1}', "[1]", r"^headers: an array, not a JSON object"),
    BadRow("headers-string", '{"n": 1}', '"x"', r"^headers: a string, not a JSON object"),
    BadRow(
        "task-header-empty",
        '{"n": 1}',
        '{"x-relay-task": {}}',
        r"^headers: x-relay-task.headers is missing, not a dict",
    ),
    BadRow(
        "header-name-over-255-bytes",
        '{"n": 1}',
        json.dumps({"k" * 300: 1}),
        r"^unsendable: cannot be sent over AMQP: a header name is 300 bytes in UTF-8, over the 255",
    ),
    BadRow(
        "routing-key-over-255-bytes",
        '{"n": 1}',
        None,
        r"^unsendable: cannot be sent over AMQP: event_type is 404 bytes in UTF-8, over the 255",
        event_type="bad." + "é" * 200,  # 204 characters, 404 bytes: the column holds 255 characters
    ),
    BadRow("payload-not-json", "not json", None, r"^payload: not JSON: ", frozenset({"sqlite"})),
    BadRow("headers-not-json", '{"n": 1}', "{oops", r"^headers: not JSON: ", frozenset({"sqlite"})),
    BadRow(  # SQLite keeps JSON text that reads as a number as a number: this one as infinity
        "bare-number-beyond-a-double",
        "1e999",
        None,
        r"^payload: a number beyond a double \(inf\)",
        frozenset({"sqlite"}),
    ),
    # A time the database keeps and Python's datetime cannot hold: psycopg refuses to load
    # PostgreSQL's infinities, PyMySQL hands MariaDB's zero date over as text, and SQLite
    # keeps any value (epoch seconds from another language, or a word).
    BadRow(
        "created-at-infinity",
        '{"n": 1}',
        None,
        r"^created_at: outside the years 1 to 9999",
        frozenset({"postgresql"}),
        created_at="'infinity'",
    ),
    BadRow(
        "created-at-minus-infinity",
        '{"n": 1}',
        None,
        r"^created_at: outside the years 1 to 9999",
        frozenset({"postgresql"}),
        created_at="'-infinity'",
    ),
    BadRow(
        "created-at-zero-date",
        '{"n": 1}',
        None,
        r"^created_at: '0000-00-00 00:00:00(\.0+)?' is not a time",
        frozenset({"mysql"}),
        created_at="'0000-00-00 00:00:00'",
    ),
    BadRow(
        "created-at-epoch-seconds",
        '{"n": 1}',
        None,
        r"^created_at: 1735689600 \(a number\) is not a time",
        frozenset({"sqlite"}),
        created_at="1735689600",
    ),
    BadRow(
        "created-at-not-a-time",
        '{"n": 1}',
        None,
        r"^created_at: 'yesterday' is not a time",
        frozenset({"sqlite"}),
        created_at="'yesterday'",
    ),
)
assert all(r.kinds <= _ALL for r in BAD_ROWS)


def for_kind(kind: str) -> list[BadRow]:
    """The bad rows a database of ``kind`` (SQLAlchemy's dialect name) accepts."""
    return [r for r in BAD_ROWS if kind in r.kinds]


def insert(engine: sa.Engine, row: BadRow) -> int:
    """Write ``row`` with plain SQL, as a service in another language would; returns its id."""
    cast = "CAST({} AS jsonb)" if engine.dialect.name == "postgresql" else "{}"
    created = ("", "") if row.created_at is None else (", created_at", f", {row.created_at}")
    sql = sa.text(
        f"INSERT INTO outbox (event_type, payload, headers{created[0]}) "
        f"VALUES (:event_type, {cast.format(':payload')}, {cast.format(':headers')}{created[1]})"
    )
    params = {"event_type": row.event_type, "payload": row.payload, "headers": row.headers}
    with engine.begin() as conn:
        conn.execute(sql, params)
        found = conn.execute(
            sa.text("SELECT max(id) FROM outbox WHERE event_type = :t"), {"t": row.event_type}
        ).scalar_one()
    return int(found)


def good_then_bad_then_good(engine: sa.Engine, good: int) -> tuple[list[int], dict[int, BadRow]]:
    """``good`` events, every bad row this database accepts, ``good`` more: the ids of the good
    ones and the bad rows by id."""
    first = enqueue_committed(engine, good, event_type="good.event")
    bad = {insert(engine, row): row for row in for_kind(engine.dialect.name)}
    return first + enqueue_committed(engine, good, event_type="good.event"), bad


def last_errors(engine: sa.Engine, ids: list[int]) -> dict[int, tuple[str, int, str | None]]:
    """``(status, attempt, last_error)`` of each row of ``ids``."""
    query = sa.text("SELECT id, status, attempt, last_error FROM outbox WHERE id IN :ids")
    query = query.bindparams(sa.bindparam("ids", expanding=True))
    with engine.connect() as conn:
        return {i: (s, a, e) for i, s, a, e in conn.execute(query, {"ids": ids})}


def check_dead_lettered(
    engine: sa.Engine, bad: dict[int, BadRow], max_attempts: int
) -> dict[str, str]:
    """Every bad row ``failed`` with its reason after at most ``max_attempts`` claims, and
    listed as the operator's tools list dead letters; returns the reason of each by name
    (printed by the tests, so an operator sees what they read)."""
    found = last_errors(engine, list(bad))
    reasons = {}
    for id_, row in bad.items():
        status, attempt, error = found[id_]
        assert status == "failed", f"{row.name}: {status} at attempt {attempt} ({error})"
        assert 1 <= attempt <= max_attempts, f"{row.name}: failed at attempt {attempt}"
        assert error, f"{row.name}: failed without a reason"
        assert re.search(row.reason, error), f"{row.name}: last_error {error!r}"
        reasons[row.name] = error
    # What `relay failed list` and the console list: every dead letter, whatever it holds.
    failed = EventFilter(statuses=(Status.FAILED,), all=True)
    listed = OperationsStore(engine).list_events(failed, limit=len(bad) + 1)
    assert {r["id"]: r["last_error"] for r in listed} == {i: found[i][2] for i in bad}
    return reasons
