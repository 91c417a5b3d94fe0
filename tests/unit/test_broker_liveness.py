"""The publisher's connection policy, pure: each blocked episode logged once with the broker's
reason, the gauge hook told of its start and end, a paused relay never opens the breaker, and a
failover URL's nodes tried from the last good one."""

from __future__ import annotations

import logging

import pytest

from relay.exceptions import BrokerBlocked, BrokerUnavailable, PublishError
from relay.publishers.kombu_connection import failover_order
from relay.publishers.liveness import BlockedState


def test_an_episode_is_logged_once_and_reported_start_and_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Seen again on every reconnect while the alarm lasts, a block is one warning."""
    heard: list[str | None] = []
    state = BlockedState(heard.append)
    with caplog.at_level(logging.WARNING, "relay.publishers.liveness"):
        state.unblocked()  # nothing to end
        state.blocked("low on memory")
        state.blocked("low on memory")
        state.unblocked()
        state.unblocked()
    assert heard == ["low on memory", None]
    blocked = [r for r in caplog.records if "blocked publishing (low on memory)" in r.message]
    assert len(blocked) == 1
    assert sum("unblocked publishing" in r.message for r in caplog.records) == 1


@pytest.mark.parametrize(
    ("error", "outage", "retryable"),
    [
        (BrokerUnavailable, True, True),
        (BrokerBlocked, False, True),
        (PublishError, True, False),
    ],
)
def test_what_a_broker_error_means_is_its_class(
    error: type[PublishError], outage: bool, retryable: bool
) -> None:
    """A blocked broker is retryable but no outage: no breaker, no reconnect."""
    assert error.outage is outage
    assert error.retryable is retryable


@pytest.mark.parametrize(
    ("url", "first", "order"),
    [
        ("amqp://a//", 0, ["amqp://a//"]),
        ("amqp://a//", 3, ["amqp://a//"]),
        ("amqp://a//;amqp://b//", 0, ["amqp://a//", "amqp://b//"]),
        ("amqp://a//;amqp://b//", 1, ["amqp://b//", "amqp://a//"]),
        ("amqp://a//; amqp://b//;amqp://c//", 2, ["amqp://c//", "amqp://a//", "amqp://b//"]),
    ],
)
def test_failover_nodes_start_at_the_last_good_one(url: str, first: int, order: list[str]) -> None:
    """Kombu's ``;`` list, rotated so a reconnect tries the node that worked before the
    dead first one."""
    assert failover_order(url, first) == order
