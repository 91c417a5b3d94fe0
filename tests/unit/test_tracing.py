"""relay.observe.tracing's publish hook without services: traced rows get their context, odd rows
pass."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from relay.observe.tracing import PublishTracer, messaging_system
from relay.records import ClaimedEvent, PublishResult

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
GOOD = f"00-{TRACE_ID}-b7ad6b7169203331-01"


def _event(n: int, headers: Mapping[str, Any] | None) -> ClaimedEvent:
    return ClaimedEvent(n, "shop.order", {}, headers, None, 1, datetime.now(UTC))


def _sent(events: list[ClaimedEvent]) -> tuple[PublishResult, list[ClaimedEvent]]:
    seen: list[ClaimedEvent] = []

    def send(batch: list[ClaimedEvent]) -> PublishResult:
        seen.extend(batch)
        return PublishResult(confirmed=list(batch))

    return PublishTracer("outbox").publish(events, send), seen


def test_a_traced_row_is_sent_with_a_context_of_its_trace_and_others_untouched() -> None:
    """The traced row's message headers carry a traceparent of the same trace; a row without
    one is sent as it was; the result is the sender's."""
    traced, plain = _event(1, {"traceparent": GOOD, "tenant": "a"}), _event(2, None)
    result, seen = _sent([traced, plain])
    assert [e.id for e in result.confirmed] == [1, 2]
    assert seen[1] is plain
    assert seen[0].headers is not None
    assert seen[0].headers["tenant"] == "a"
    assert seen[0].headers["traceparent"].split("-")[1] == TRACE_ID


@pytest.mark.parametrize(
    "headers",
    [{"traceparent": 123}, {"traceparent": "garbage"}, {"traceparent": None}, {"x": 1}],
)
def test_odd_trace_headers_never_stop_a_batch(headers: dict[str, Any]) -> None:
    """A row written by plain SQL with anything under traceparent is still published."""
    result, seen = _sent([_event(1, headers)])
    assert [e.id for e in result.confirmed] == [1]
    assert [e.id for e in seen] == [1]


@pytest.mark.parametrize(
    ("url", "system"),
    [
        ("amqp://guest@h//", "rabbitmq"),
        ("pyamqp://h", "rabbitmq"),
        ("rediss://h/0", "redis"),
        ("filesystem://", "kombu"),
    ],
)
def test_messaging_system_follows_the_events_url(url: str, system: str) -> None:
    """Spans name the broker by RELAY_EVENTS_URL's scheme."""
    assert messaging_system(url) == system
