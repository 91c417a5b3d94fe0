"""The publisher's blocked state, pure: each episode logged once with the broker's reason, the
gauge hook told of its start and end, and a paused relay never opens the breaker."""

from __future__ import annotations

import logging

import pytest

from relay.exceptions import BrokerBlocked, BrokerUnavailable, PublishError
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
