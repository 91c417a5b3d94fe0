"""Topic matching of event handlers follows AMQP's: ``*`` one word, ``#`` zero or more."""

from __future__ import annotations

import pytest

from relay.consume.consumer import topic_matches


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("order.*", "order.created", True),
        ("order.*", "order.created.v2", False),
        ("order.*", "order", False),
        ("order.#", "order", True),
        ("order.#", "order.created.v2", True),
        ("#", "anything.at.all", True),
        ("*.created", "order.created", True),
        ("*.created", "created", False),
        ("order.#.v2", "order.v2", True),
        ("order.#.v2", "order.a.b.v2", True),
        ("order.#.v2", "order.a.b.v3", False),
        ("order.created", "order.created", True),
        ("order.created", "order.updated", False),
    ],
)
def test_topic_patterns(pattern: str, key: str, matches: bool) -> None:
    """Each row: a pattern, a routing key, and whether RabbitMQ would route it."""
    assert topic_matches(pattern, key) is matches
