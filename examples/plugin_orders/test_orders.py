"""The order service's events, tested with the relay's pytest plugin: what a commit writes,
what a rollback does not, what a drain delivers, and what a failed assertion says."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from orders import OverCreditLimit, place_order

from relay.testing.outbox import TestOutbox


def test_placing_an_order_commits_order_placed(engine: sa.Engine, relay_outbox: TestOutbox) -> None:
    order = place_order(engine, "ada", 2_500)
    relay_outbox.assert_committed(
        ("order.placed", {"order": order, "customer": "ada", "total_cents": 2_500})
    )
    assert relay_outbox.committed()[0].ordering_key == "customer-ada"


def test_a_refused_order_commits_no_event(engine: sa.Engine, relay_outbox: TestOutbox) -> None:
    with pytest.raises(OverCreditLimit):
        place_order(engine, "bob", 1_000_000)
    relay_outbox.assert_committed()  # the transaction rolled back: no event
    place_order(engine, "bob", 900)
    relay_outbox.assert_committed("order.placed")


def test_drain_delivers_what_was_committed(
    engine: sa.Engine, relay_outbox: TestOutbox, relay_drain: Callable[[], list[Any]]
) -> None:
    first, second = place_order(engine, "cy", 100), place_order(engine, "cy", 200)
    assert [e.status for e in relay_outbox.pending()] == ["pending", "pending"]
    messages = relay_drain()
    assert [json.loads(m.body)["order"] for m in messages] == [first, second]
    assert relay_outbox.pending() == []
    assert {e.status for e in relay_outbox.committed()} == {"sent"}
    assert relay_drain() == []  # nothing left


def test_a_failed_assertion_shows_expected_and_committed(
    engine: sa.Engine, relay_outbox: TestOutbox
) -> None:
    place_order(engine, "dee", 300)
    with pytest.raises(AssertionError) as failure:
        relay_outbox.assert_committed(("order.shipped", {"order": 1}))
    text = str(failure.value)
    assert "expected (1):\n  1. order.shipped {'order': 1}" in text
    assert "committed (1):\n  1. order.placed {" in text
    assert "(pending)" in text
