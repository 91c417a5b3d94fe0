"""relay.django.enqueue writes through Django's connection in the caller's atomic() block."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from django.db import connections, transaction

import relay
import relay.django
from relay.exceptions import EventError
from relay.produce import core
from relay.store.engine import create_engine
from relay.store.schema.tables import outbox
from tests.support.rows import rows


@pytest.fixture
def engine(django_db: str) -> Iterator[sa.Engine]:
    """A SQLAlchemy engine on the test's database, to look at what Django committed."""
    eng = create_engine(django_db)
    yield eng
    eng.dispose()


def test_commit_writes_the_event(engine: sa.Engine) -> None:
    """An event enqueued in a committed atomic() block is a pending row with its columns."""
    with transaction.atomic():
        row_id = relay.django.enqueue(
            "order.created", {"id": 7}, headers={"tenant": "acme"}, ordering_key="o-7"
        )
    row = rows(engine, row_id)[row_id]
    assert (row["status"], row["payload"], row["headers"], row["ordering_key"], row["seq"]) == (
        "pending",
        {"id": 7},
        {"tenant": "acme"},
        "o-7",
        1,
    )


def test_rollback_leaves_no_event(engine: sa.Engine) -> None:
    """An exception leaving atomic() rolls the event back with the business change."""
    with pytest.raises(RuntimeError, match="business failed"):
        _enqueue_then_fail("order.created", {"id": 1})
    assert rows(engine) == {}


def _enqueue_then_fail(event_type: str, payload: Any, **options: Any) -> None:
    with transaction.atomic():
        relay.django.enqueue(event_type, payload, **options)
        raise RuntimeError("business failed")


def test_savepoint_rolled_back_takes_only_its_events(engine: sa.Engine) -> None:
    """A nested atomic() rolled back drops its events (and their key numbers); the outer
    block's events commit, and the key's numbers have no gap."""
    with transaction.atomic():
        first = relay.django.enqueue("e", {"n": 1}, ordering_key="k")
        with pytest.raises(RuntimeError, match="business failed"):
            _enqueue_then_fail("e", {"n": 2}, ordering_key="k")
        third = relay.django.enqueue("e", {"n": 3}, ordering_key="k")
    found = rows(engine)
    assert sorted(found) == [first, third]
    assert [found[first]["seq"], found[third]["seq"]] == [1, 2]


def test_delay_makes_the_event_due_later(engine: sa.Engine) -> None:
    """``delay`` sets next_retry_at in the future, like relay.enqueue."""
    with transaction.atomic():
        row_id = relay.django.enqueue("e", {}, delay=3600)
    with engine.connect() as conn:
        due = conn.execute(sa.select(outbox.c.next_retry_at, outbox.c.created_at)).one()
    assert due.next_retry_at is not None
    assert (due.next_retry_at - due.created_at).total_seconds() > 3500
    assert row_id in rows(engine)


def test_autocommit_is_refused(engine: sa.Engine) -> None:
    """Outside atomic() the event would commit alone: refused, nothing written."""
    with pytest.raises(
        EventError, match=r"using database .default. is in autocommit: .*transaction\.atomic\(\)"
    ):
        relay.django.enqueue("e", {})
    with pytest.raises(EventError, match="autocommit"):
        relay.django.lock_keys(["k"])
    assert rows(engine) == {}


def test_unknown_alias_is_refused(django_db: str) -> None:
    """A ``using`` that is not in DATABASES is named in the error."""
    with pytest.raises(EventError, match="'nope'"), transaction.atomic():
        relay.django.enqueue("e", {}, using="nope")


BAD: list[tuple[str, Any, dict[str, Any]]] = [
    ("", {}, {}),
    ("e", {1, 2}, {}),
    ("e", {}, {"headers": {"outbox_id": 1}}),
    ("e", {}, {"ordering_key": ""}),
    ("e", {}, {"delay": -1}),
    (123, {}, {}),
    ("e", "x" * (core.DEFAULT_MAX_PAYLOAD_BYTES + 1), {}),
]


def test_bad_events_are_refused_like_relay_enqueue(engine: sa.Engine) -> None:
    """Each bad event raises the EventError relay.enqueue raises, before any statement."""
    django = connections["default"]
    django.force_debug_cursor = True  # log every statement, so "none ran" can be seen
    with transaction.atomic():
        before = len(django.queries_log)
        relay.django.enqueue("e", {})
        assert len(django.queries_log) > before  # a good event does run a statement
        transaction.set_rollback(True)
    for event_type, payload, options in BAD:
        with pytest.raises(EventError) as sqlalchemy_error, engine.begin() as conn:
            relay.enqueue(conn, event_type, payload, **options)
        with transaction.atomic():
            queries = len(django.queries_log)
            with pytest.raises(EventError) as django_error:
                relay.django.enqueue(event_type, payload, **options)
            assert len(django.queries_log) == queries
        assert str(django_error.value) == str(sqlalchemy_error.value)
    with pytest.raises(EventError, match="ordering_keys") as one_str, transaction.atomic():
        relay.django.lock_keys("order-1")
    assert "not one str" in str(one_str.value)
    assert rows(engine) == {}


def test_lock_keys_takes_no_number(engine: sa.Engine) -> None:
    """lock_keys in atomic() locks keys without numbering: the next event of a key is 1."""
    with transaction.atomic():
        relay.django.lock_keys(["b", "a", "a"])
        row_id = relay.django.enqueue("e", {}, ordering_key="a")
    assert rows(engine, row_id)[row_id]["seq"] == 1


def test_deadlines_reach_the_row_and_bad_ones_are_refused(engine: sa.Engine) -> None:
    """``expires_at``/``expires_in`` as with ``relay.enqueue``, and a task's ``expires``
    (``relay.django.send_task``) becomes its row's deadline; both given, or a naive time, are
    refused naming the fields before anything is written."""
    from celery import Celery

    at = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    with transaction.atomic():
        with pytest.raises(EventError, match="expires_at and expires_in are exclusive"):
            relay.django.enqueue("t", {}, expires_at=at, expires_in=60)
        with pytest.raises(EventError, match="expires_at must be timezone-aware"):
            relay.django.enqueue("t", {}, expires_at=datetime(2031, 1, 1))
        fixed = relay.django.enqueue("t", {}, expires_at=at)
        within = relay.django.enqueue("t", {}, expires_in=timedelta(days=1))
        relay.django.send_task("tasks.remind", (1,), expires=at, app=Celery(set_as_current=False))
    found = rows(engine)
    task = max(found)
    assert sorted(found) == [fixed, within, task]
    assert found[fixed]["expires_at"] == at
    assert found[within]["expires_at"] - found[within]["created_at"] > timedelta(hours=23)
    assert found[task]["expires_at"] == at
