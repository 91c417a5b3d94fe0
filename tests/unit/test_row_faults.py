"""Rows no message can carry: how a claim reads them, what each reason says, and what the
dispatcher does with them on the shipped doubles (real databases and brokers:
tests/acceptance/test_faults_bad_rows.py)."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings
from sqlalchemy.dialects import sqlite

from relay import ordering
from relay.config import Settings
from relay.dispatch.decisions import exhausted
from relay.dispatch.dispatcher import Dispatcher
from relay.exceptions import EventUnsendable
from relay.publishers import message
from relay.publishers.amqp import _encode
from relay.publishers.frames import BatchEncoder
from relay.records import ClaimedEvent, Status, headers_fault
from relay.store.engine import json_loads_many
from relay.store.timestamps import ReadTimestamp
from relay.testing import InMemoryPublisher, InMemoryStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)
GOOD = ('{"n": 1}', None)

#: (payload text, headers text) -> the start of the defect the row must carry (None: none).
ROWS: list[tuple[str, str | None, str | None]] = [
    ('{"n": 1}', None, None),
    ('{"n": 1}', '{"tenant": "a"}', None),
    (
        '{"n": 1' + "0" * 5000 + "}",
        None,
        "payload: an integer of 5,001 digits, more than the 4,300",
    ),
    ("[" * 5000 + "]" * 5000, None, "payload: JSON nested deeper than the relay decodes"),
    ("not json", None, "payload: not JSON: Expecting value"),
    ("", None, "payload: not JSON"),
    ('{"n": 1}', "[1]", "headers: an array, not a JSON object"),
    ('{"n": 1}', '"x"', "headers: a string, not a JSON object"),
    ('{"n": 1}', "7", "headers: a number, not a JSON object"),
    ('{"n": 1}', "true", "headers: a boolean, not a JSON object"),
    ('{"n": 1}', "{oops", "headers: not JSON"),
    ('{"n": 1}', '{"h": [' + "[" * 5000 + "]" * 5000 + "]}", "headers: JSON nested deeper"),
    ('{"n": 1}', '{"x-relay-task": {}}', "headers: x-relay-task.headers is missing"),
    ('{"n": 1}', '{"x-relay-task": 3}', "headers: x-relay-task is not an object"),
    (
        '{"n": 1}',
        '{"x-relay-task": {"headers": {}, "routing_key": 1, "exchange": ""}}',
        "headers: x-relay-task.routing_key is a int, not a str",
    ),
    (
        '{"n": 1}',
        '{"x-relay-task": {"headers": {}, "routing_key": "q", "exchange": "", "declare": []}}',
        "headers: x-relay-task.declare is a list, not a dict",
    ),
    (
        '{"n": 1}',
        '{"x-relay-task": {"headers": {"expires": "soon"}, "routing_key": "q", "exchange": ""}}',
        "headers: x-relay-task.headers.expires 'soon' is not an ISO 8601 time",
    ),
    (
        '{"n": 1}',
        '{"x-relay-task": {"headers": {"expires": null}, "routing_key": "q", "exchange": ""}}',
        None,
    ),
]


def _row(i: int, payload: str | None, headers: str | None) -> tuple[Any, ...]:
    """A claim's row, in ``claim_columns`` order."""
    return (i, "thing.happened", payload, headers, None, 1, NOW, None, f"eid-{i}", False, None)


@pytest.mark.parametrize(("payload", "headers", "defect"), ROWS)
def test_each_bad_row_carries_its_own_reason_and_its_batch_reads_as_usual(
    payload: str, headers: str | None, defect: str | None
) -> None:
    """A row among good ones: it alone carries a defect (starting as the table says), the good
    rows around it decode exactly as in a batch without it."""
    rows = [_row(1, *GOOD), _row(2, payload, headers), _row(3, '{"n": 3}', '{"a": 1}')]
    events = ClaimedEvent.from_claims(rows, json_loads_many, "/src")
    assert [e.id for e in events] == [1, 2, 3]
    assert (events[0].payload, events[0].headers, events[0].defect) == ({"n": 1}, None, None)
    assert (events[2].payload, events[2].headers, events[2].defect) == ({"n": 3}, {"a": 1}, None)
    if defect is None:
        assert events[1].defect is None
    else:
        assert events[1].defect is not None
        assert events[1].defect.startswith(defect), events[1].defect
        # Headers that cannot be a message's are never handed on (task_expires reads them).
        assert events[1].headers is None or isinstance(events[1].headers, dict)


@pytest.mark.parametrize(
    ("stored", "payload", "defect"),
    [
        (42, 42, None),
        (1.5, 1.5, None),
        (1.2345678901234567e19, 1.2345678901234567e19, None),
        (float("inf"), None, "payload: a number beyond a double (inf): SQLite stored it so"),
        (float("nan"), None, "payload: a number beyond a double (nan)"),
    ],
)
def test_a_payload_sqlite_kept_as_a_number_is_that_json_number(
    stored: Any, payload: Any, defect: str | None
) -> None:
    """SQLite stores JSON text that reads as a number (``'42'``, ``'1.5'``) as that number:
    the claim reads it as the JSON value it was (it was dead-lettered with a TypeError), and
    one that overflowed a double (``'1e999'``, a 5,001-digit integer) is the row's defect."""
    events = ClaimedEvent.from_claims(
        [_row(1, *GOOD), _row(2, stored, None)], json_loads_many, "/src"
    )
    assert events[0].payload == {"n": 1}
    assert events[1].payload == payload
    if defect is None:
        assert events[1].defect is None
    else:
        assert events[1].defect is not None
        assert events[1].defect.startswith(defect), events[1].defect


@pytest.mark.parametrize(
    ("created_at", "defect"),
    [
        (NOW, None),
        (None, "created_at: outside the years 1 to 9999 (infinity or -infinity?)"),
        ("0000-00-00 00:00:00.000000", "created_at: '0000-00-00 00:00:00.000000' is not a time"),
        ("yesterday", "created_at: 'yesterday' is not a time"),
        (1735689600, "created_at: 1735689600 (a number) is not a time"),
        (b"\x00", "created_at: b'\\x00' (bytes) is not a time"),
        ("x" * 500, "created_at: 'xxxxxxxx"),
    ],
)
def test_a_created_at_that_is_no_time_is_the_rows_defect(
    created_at: Any, defect: str | None
) -> None:
    """``created_at`` as the claim reads it (``ReadTimestamp``: a datetime, or what the database
    stored when Python holds no such time, None where PostgreSQL's SQL left it out): a row
    whose time is none carries a defect naming it, with a datetime in its place, and the rows
    around it read as usual."""
    row = (2, "thing.happened", '{"n": 2}', None, None, 1, created_at, None, "eid-2", False, None)
    rows = [_row(1, *GOOD), row, _row(3, *GOOD)]
    first, event, last = ClaimedEvent.from_claims(rows, json_loads_many, "/src")
    assert (first.defect, last.defect, first.created_at) == (None, None, NOW)
    assert isinstance(event.created_at, datetime)
    if defect is None:
        assert (event.defect, event.created_at) == (None, NOW)
    else:
        assert event.defect is not None
        assert event.defect.startswith(defect), event.defect
        assert len(event.defect) < 200
        assert event.defect.endswith("or leave it to the column's default")


@pytest.mark.parametrize(
    ("stored", "read"),
    [
        ("2026-01-01 00:00:00.000000", NOW),
        ("2026-01-01T02:00:00+02:00", NOW),
        (datetime(2026, 1, 1), NOW),
        (NOW, NOW),
        (None, None),
        ("garbage", "garbage"),
        (1735689600, 1735689600),
    ],
)
def test_a_claimed_time_is_read_without_raising(stored: Any, read: Any) -> None:
    """SQLite's text (any text), MySQL's datetime or zero-date text, PostgreSQL's datetime:
    read as an aware datetime when it is a time, and handed on as stored when not."""
    assert ReadTimestamp().process_result_value(stored, sqlite.dialect()) == read


def test_a_good_batch_is_decoded_in_one_call() -> None:
    """The hot path is unchanged: every text of a good batch goes through one call."""
    calls: list[int] = []

    def counting(texts: list[Any]) -> list[Any]:
        calls.append(len(texts))
        return json_loads_many(texts)

    rows = [_row(i, json.dumps({"n": i}), None) for i in range(100)]
    events = ClaimedEvent.from_claims(rows, counting)
    assert calls == [200]
    assert all(e.defect is None for e in events)


@pytest.mark.parametrize(
    ("headers", "fault"),
    [
        (None, None),
        ({}, None),
        ({"a": [1, {"b": None}]}, None),
        ([1], "headers: an array"),
        ("x", "headers: a string"),
        ({"x-relay-task": None}, "headers: x-relay-task is not an object"),
    ],
)
def test_headers_fault_names_what_no_message_header_can_be(headers: Any, fault: str | None) -> None:
    """The check the claim and the in-memory store share (decoded headers)."""
    found = headers_fault(headers)
    assert (found or "").startswith(fault or "")
    assert (found is None) == (fault is None)


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "given_up"),
    [(1, 3, False), (3, 3, False), (4, 3, True), (11, 10, True), (1, 1, False), (2, 1, True)],
)
def test_a_row_claimed_past_max_attempts_is_given_up(
    attempt: int, max_attempts: int, given_up: bool
) -> None:
    """Attempts count at claim: only a claim past RELAY_MAX_ATTEMPTS (each lease expired
    without an outcome) ends the row, and the reason says how many claims it took."""
    why = exhausted(attempt, max_attempts)
    assert (why is not None) == given_up
    if why is not None:
        assert f"claimed {attempt} times" in why
        assert f"RELAY_MAX_ATTEMPTS={max_attempts}" in why


def _event(id_: int, key: str | None = None, seq: int | None = None) -> ClaimedEvent:
    return ClaimedEvent(id_, "t", {}, None, key, 1, NOW, seq)


def test_rows_behind_a_refused_row_of_their_key_are_given_back() -> None:
    """Refused before publishing: later rows of its key wait (no overtaking), earlier rows of
    the key, other keys and unordered rows go on."""
    k1, k2, k3 = _event(1, "k", 1), _event(2, "k", 2), _event(3, "k", 3)
    other, plain = _event(4, "j", 1), _event(5)
    todo, behind = ordering.behind_refusals([k1, k2, k3, other, plain], [k2])
    assert [e.id for e in todo] == [1, 4, 5]
    assert [e.id for e in behind] == [3]
    todo, behind = ordering.behind_refusals([k1, plain], [plain])
    assert ([e.id for e in todo], behind) == ([1], [])


def _dispatcher(store: InMemoryStore, publisher: InMemoryPublisher) -> Dispatcher:
    settings = Settings(lease_seconds=30.0, max_attempts=3)
    return Dispatcher(store, publisher, settings, worker_id="w1", rng=random.Random(7))


def test_a_bad_row_is_dead_lettered_at_once_and_its_key_waits() -> None:
    """Key k: rows 1, 2 (headers an array), 3; and an unordered good row. Row 1 and the
    unordered row are sent, row 2 failed on its first attempt with its reason, row 3 given back
    unpublished (its key is held behind the failed row, as for any failed head)."""
    store = InMemoryStore()
    first = store.add("t", {"n": 1}, ordering_key="k")
    bad = store.add("t", {"n": 2}, ordering_key="k", headers=[1])  # type: ignore[arg-type]
    third = store.add("t", {"n": 3}, ordering_key="k")
    plain = store.add("t", {"n": 4})
    publisher = InMemoryPublisher()
    report = _dispatcher(store, publisher).run_once()
    assert (report.sent, report.buried, report.released) == (2, 1, 1)
    assert sorted(publisher.ids) == sorted([first, plain])
    assert store.rows[bad].status is Status.FAILED
    assert store.rows[bad].attempt == 1
    assert (store.rows[bad].last_error or "").startswith("headers: an array")
    assert store.rows[third].status is Status.PENDING
    assert store.rows[third].attempt == 0


def test_a_row_whose_leases_kept_expiring_is_buried_unpublished() -> None:
    """A row claimed for the fourth time with RELAY_MAX_ATTEMPTS=3 (three relays died holding
    it) is not published again: failed, with the reason."""
    store = InMemoryStore()
    row = store.add("t", {"n": 1})
    store.rows[row].attempt = 3
    publisher = InMemoryPublisher()
    report = _dispatcher(store, publisher).run_once()
    assert (report.claimed, report.sent, report.buried) == (1, 0, 1)
    assert publisher.ids == []
    assert store.rows[row].status is Status.FAILED
    assert "attempts exhausted: claimed 4 times" in (store.rows[row].last_error or "")


def test_a_message_that_cannot_be_built_is_unsendable_at_once() -> None:
    """A float JSON has no text for (``1e400`` read as infinity) is the row's fault: the
    double, like the real publishers, reports it unsendable; the dispatcher buries it."""
    store = InMemoryStore()
    row = store.add("t", {"x": float("inf")})
    good = store.add("t", {"x": 1})
    publisher = InMemoryPublisher()
    report = _dispatcher(store, publisher).run_once()
    assert (report.sent, report.buried, report.rescheduled) == (1, 1, 0)
    assert publisher.ids == [good]
    assert re.match(r"unsendable: cannot be encoded: ValueError", store.rows[row].last_error or "")


#: JSON texts as any producer may write them: JSON values (including numbers and nesting no
#: message can carry), and, as SQLite keeps them, any text at all.
_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=300), inner),
    max_leaves=20,
)
_TEXTS = (
    _JSON_VALUES.map(json.dumps)
    | st.text(max_size=40)
    | st.integers(min_value=4000, max_value=6000).map(lambda n: "1" * n)
    | st.integers(min_value=1, max_value=3000).map(lambda n: "[" * n + "]" * n)
    | st.sampled_from(["1e400", "-1e400", '{"x-relay-task": {}}', '{"x-relay-task": []}'])
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(_TEXTS, st.none() | _TEXTS, st.text(max_size=300)), max_size=5))
def test_nothing_a_row_holds_raises_out_of_the_per_row_path(
    rows: list[tuple[str, str | None, str]],
) -> None:
    """Whatever payload, headers and event type a row holds, the path from the claim's texts to
    a message's AMQP frames raises nothing but EventUnsendable, and a row either carries a
    defect, becomes unsendable, or becomes frames."""
    claimed = [
        (i, event_type, payload, headers, None, 1, NOW, None, f"e{i}", False, None)
        for i, (payload, headers, event_type) in enumerate(rows)
    ]
    events = ClaimedEvent.from_claims(claimed, json_loads_many, "/src")
    assert len(events) == len(rows)
    encoder = BatchEncoder(1, "outbox", 131072)
    reasons: list[str] = []
    for event in events:
        if event.defect is not None:
            assert event.defect.startswith(("payload: ", "headers: "))
            continue
        try:
            frames = _encode(encoder, message.prepare(event))
        except EventUnsendable as exc:
            reasons.append(str(exc))
            continue
        assert frames[:1] == b"\x01"  # a basic.publish method frame
    assert all(reasons), "an unsendable row without a reason"


def test_headers_that_decode_but_nest_too_deep_for_a_frame_are_unsendable() -> None:
    """900 levels decode (the C scanner goes deeper than the encoder's Python recursion): the
    row is not a defect at claim, and its frames fail as EventUnsendable, naming why."""
    depth = 900
    headers = '{"h": ' + "[" * depth + "]" * depth + "}"
    (event,) = ClaimedEvent.from_claims([_row(1, "{}", headers)], json_loads_many)
    assert event.defect is None
    with pytest.raises(EventUnsendable, match="headers nested too deep"):
        _encode(BatchEncoder(1, "outbox", 131072), message.prepare(event))
