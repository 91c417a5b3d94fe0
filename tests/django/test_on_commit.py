"""The wake-up of relay.django.enqueue goes through transaction.on_commit, once a transaction."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import transaction

import relay.django
from relay.produce.enqueue import default
from relay.store.engine import create_engine
from tests.support.rows import rows


@pytest.fixture
def calls(django_db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What ran after commit, in order; the wake-up records what another connection sees."""
    seen: list[str] = []
    engine = create_engine(django_db)

    def wake() -> None:
        seen.append(f"wake: {len(rows(engine))} committed")

    monkeypatch.setattr(default(), "wake", wake)
    yield seen
    engine.dispose()


def test_wake_runs_once_after_commit_in_on_commit_order(calls: list[str]) -> None:
    """Callbacks run in registration order; the relay's wake-up takes the place of the first
    enqueue, runs once for many events, and the events are committed when it runs."""
    with transaction.atomic():
        transaction.on_commit(lambda: calls.append("before"))
        relay.django.enqueue("e", {"n": 1})
        transaction.on_commit(lambda: calls.append("between"))
        relay.django.enqueue("e", {"n": 2})
        assert calls == []
    assert calls == ["before", "wake: 2 committed", "between"]


def test_rollback_wakes_nobody(calls: list[str]) -> None:
    """A rolled-back transaction wrote nothing: no wake-up."""
    with transaction.atomic():
        relay.django.enqueue("e", {})
        transaction.set_rollback(True)
    assert calls == []


def test_wake_survives_a_rolled_back_savepoint(calls: list[str]) -> None:
    """The first enqueue in a savepoint that rolls back loses its callback; a later enqueue
    registers it again, so the committed event still wakes the relay, once."""
    with transaction.atomic():
        with transaction.atomic():
            relay.django.enqueue("e", {"n": 1})
            transaction.set_rollback(True)
        relay.django.enqueue("e", {"n": 2})
        relay.django.enqueue("e", {"n": 3})
    assert calls == ["wake: 2 committed"]


def test_a_failing_wake_does_not_undo_the_commit(
    django_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wake-up that raises is logged; the event stays committed (the tick picks it up)."""

    def broken() -> None:
        raise RuntimeError("broker down")

    monkeypatch.setattr(default(), "wake", broken)
    with transaction.atomic():
        row_id = relay.django.enqueue("e", {})
    engine = create_engine(django_db)
    try:
        assert list(rows(engine)) == [row_id]
    finally:
        engine.dispose()
