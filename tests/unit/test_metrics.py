"""relay.observe.metrics without services: the observer's counts and the batched histogram
update."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry, Histogram

from relay.observe.metrics import (
    DEFAULT_MAX_EVENT_TYPES,
    OTHER_EVENT_TYPE,
    PrometheusObserver,
    observe_many,
)
from relay.observe.observers import Recorded
from relay.records import ClaimedEvent, PublishResult


def _event(n: int, event_type: str, age: float = 0.0) -> ClaimedEvent:
    created = datetime.now(UTC) - timedelta(seconds=age)
    return ClaimedEvent(n, event_type, {}, None, None, 1, created)


@pytest.mark.parametrize("amounts", [[], [0.0], [0.001, 0.0025, 7.0, 1e9, 0.5, 0.5, -1.0]])
def test_observe_many_equals_one_observe_per_amount(amounts: list[float]) -> None:
    """Bucket counts, count and sum match the client's own observe, edges included."""
    rng = random.Random(7)
    amounts = [*amounts, *(rng.expovariate(2.0) for _ in range(200))]
    one, many = CollectorRegistry(), CollectorRegistry()
    buckets = (0.001, 0.0025, 0.5, 1.0, 7.0)
    h1 = Histogram("lag_seconds", "x", buckets=buckets, registry=one)
    h2 = Histogram("lag_seconds", "x", buckets=buckets, registry=many)
    for a in amounts:
        h1.observe(a)
    observe_many(h2, amounts)
    assert _samples(many) == _samples(one)


def _samples(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, s.labels, s.value)
        for m in registry.collect()
        for s in m.samples
        if not s.name.endswith("_created")
    ]


def test_observer_counts_by_event_type_and_only_what_was_recorded() -> None:
    """Sent, rescheduled and failed rows count under their event type; when the fence refused
    some, the recorded number counts without an event type; lag is observed per sent row."""
    registry = CollectorRegistry()
    observer = PrometheusObserver(registry)
    a, b = [_event(i, "a", age=2) for i in range(3)], [_event(10, "b")]
    result = observer.publish([*a, *b], lambda events: PublishResult(confirmed=list(events)))
    assert len(result.confirmed) == 4
    observer.claimed([*a, *b], 0.01)
    observer.recorded(Recorded([*a, *b], [], [], 0, 0, True, (4, 0, 0)))
    observer.recorded(Recorded([], b, a, 2, 3, False, (0, 1, 1)))
    observer.lease_lost(2)
    value = registry.get_sample_value
    assert value("relay_events_sent_total", {"source": "", "event_type": "a"}) == 3
    assert value("relay_events_sent_total", {"source": "", "event_type": "b"}) == 1
    assert value("relay_events_rescheduled_total", {"source": "", "event_type": "b"}) == 1
    assert value("relay_events_failed_total", {"source": "", "event_type": ""}) == 1
    assert value("relay_events_claimed_total") == 4
    assert value("relay_events_released_total") == 2
    assert value("relay_lease_lost_total") == 5
    assert value("relay_delivery_lag_seconds_count") == 4
    assert value("relay_delivery_lag_seconds_sum") >= 6
    assert value("relay_publish_seconds_count") == 1
    assert value("relay_claim_seconds_count") == 1


def test_counters_carry_each_events_source() -> None:
    """Rows of two databases (one fleet) count under their own source label."""
    registry = CollectorRegistry()
    observer = PrometheusObserver(registry)
    orders = [ClaimedEvent(1, "t", {}, None, None, 1, datetime.now(UTC), source="/shop/orders")]
    billing = [ClaimedEvent(1, "t", {}, None, None, 1, datetime.now(UTC), source="/shop/billing")]
    observer.recorded(Recorded([*orders, *billing], [], [], 0, 0, True, (2, 0, 0)))
    value = registry.get_sample_value
    assert value("relay_events_sent_total", {"source": "/shop/orders", "event_type": "t"}) == 1
    assert value("relay_events_sent_total", {"source": "/shop/billing", "event_type": "t"}) == 1


def _type_labels(registry: CollectorRegistry, name: str) -> dict[str, float]:
    return {
        s.labels["event_type"]: s.value
        for m in registry.collect()
        for s in m.samples
        if s.name == name
    }


def test_event_type_labels_are_capped_first_come_first_served_with_totals_kept() -> None:
    """10,000 distinct event types, cap 100: at most 101 label values (the first 100 seen and
    "other"), and the counts under them still add up to every row recorded."""
    registry = CollectorRegistry()
    observer = PrometheusObserver(registry, max_event_types=100)
    events = [_event(n, f"type-{n}") for n in range(10_000)]
    for start in range(0, len(events), 500):
        batch = events[start : start + 500]
        observer.recorded(Recorded(batch, [], batch[:7], 0, 0, True, (len(batch), 0, 7)))
    sent = _type_labels(registry, "relay_events_sent_total")
    assert len(sent) == 101
    assert set(sent) == {f"type-{n}" for n in range(100)} | {OTHER_EVENT_TYPE}
    assert sum(sent.values()) == 10_000
    assert sent[OTHER_EVENT_TYPE] == 9_900
    failed = _type_labels(registry, "relay_events_failed_total")
    assert len(failed) <= 101
    assert sum(failed.values()) == 7 * 20
    assert len(observer._children) <= 3 * 101  # the memory the labels hold is bounded too


def test_event_type_cap_zero_counts_every_type_as_other() -> None:
    """RELAY_METRICS_MAX_EVENT_TYPES=0: one label value for every type."""
    registry = CollectorRegistry()
    observer = PrometheusObserver(registry, max_event_types=0)
    batch = [_event(1, "a"), _event(2, "b")]
    observer.recorded(Recorded(batch, [], [], 0, 0, True, (2, 0, 0)))
    assert _type_labels(registry, "relay_events_sent_total") == {OTHER_EVENT_TYPE: 2}


def test_the_shared_observer_takes_the_settings_cap() -> None:
    """runtime.observer passes RELAY_METRICS_MAX_EVENT_TYPES on to the process's observer."""
    from relay.config import Settings
    from relay.dispatch import runtime

    try:
        chosen = runtime.observer(Settings(metrics_port=9999, metrics_max_event_types=3))
        observers = getattr(chosen, "observers", [chosen])
        shared = next(o for o in observers if isinstance(o, PrometheusObserver))
        assert shared is PrometheusObserver.shared()
        assert shared.max_event_types == 3
    finally:
        PrometheusObserver.shared(DEFAULT_MAX_EVENT_TYPES)


def test_broker_blocked_gauge_follows_the_publishers_hook() -> None:
    """``relay_broker_blocked`` is 1 from the broker's block to its unblock, else 0."""
    registry = CollectorRegistry()
    observer = PrometheusObserver(registry)

    def blocked() -> float | None:
        return registry.get_sample_value("relay_broker_blocked")

    assert blocked() == 0
    observer.broker_blocked("low on memory")
    assert blocked() == 1
    observer.broker_blocked(None)
    assert blocked() == 0


def test_the_breaker_gauge_and_the_last_confirm_follow_the_publish_results() -> None:
    """An outage opens the breaker gauge (as the cycle's breaker opens), a broker's resource
    alarm leaves it as it was (relay_broker_blocked says that), any other result closes it;
    only a confirmed batch moves the time of the last confirm."""
    from relay.exceptions import BrokerBlocked, BrokerUnavailable

    registry = CollectorRegistry()
    observer = PrometheusObserver(registry)
    value = registry.get_sample_value
    events = [_event(1, "a")]
    assert value("relay_breaker_open") == 0
    assert value("relay_last_publish_success_timestamp_seconds") == 0
    down = PublishResult(unavailable=list(events), error=BrokerUnavailable("down"))
    observer.publish(events, lambda e: down)
    assert value("relay_breaker_open") == 1
    blocked = PublishResult(unavailable=list(events), error=BrokerBlocked("alarm"))
    observer.publish(events, lambda e: blocked)
    assert value("relay_breaker_open") == 1
    assert value("relay_last_publish_success_timestamp_seconds") == 0
    observer.publish(events, lambda e: PublishResult(rejected=[(events[0], "nack")]))
    assert value("relay_breaker_open") == 0
    assert value("relay_last_publish_success_timestamp_seconds") == 0
    before = datetime.now(UTC).timestamp()
    observer.publish(events, lambda e: PublishResult(confirmed=list(e)))
    assert value("relay_last_publish_success_timestamp_seconds") >= before - 1
