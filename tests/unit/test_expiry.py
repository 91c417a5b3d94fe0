"""Events that expire, the pure parts: durations, event-type globs, ``RELAY_EXPIRE_AFTER``
(its errors and the most specific pattern winning), the producer's deadline checks, the
cycle's refusal of expired rows and its reason, the expired counter."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from prometheus_client import CollectorRegistry

from relay.config.expiry import ExpireAfter, duration_seconds, from_env, glob_regex
from relay.dispatch.decisions import expired_reason, refusals
from relay.exceptions import ConfigError, EventError
from relay.observe.metrics import PrometheusObserver
from relay.observe.observers import Recorded
from relay.produce.core import check_expiry
from relay.produce.enqueue import Producer
from relay.records import TASK_HEADER, ClaimedEvent

NOW = datetime(2026, 12, 7, 5, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("30s", 30),
        ("15m", 900),
        ("1h", 3600),
        ("7d", 604800),
        ("2w", 1209600),
        (" 1.5h ", 5400),
        ("0.5s", 0.5),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    """The units s, m, h, d, w (bare numbers are seconds), spaces around them allowed."""
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "1x", "h", "-5s", "1 h m", "1e3s", "40000d"])
def test_bad_durations_name_themselves(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a duration|is longer than a century") as info:
        duration_seconds(text)
    assert str(info.value).startswith(repr(text))


@pytest.mark.parametrize(
    ("glob", "name", "matches"),
    [
        ("orders.*", "orders.reminder", True),
        ("orders.*", "orders.", True),
        ("orders.*", "orders", False),
        ("orders.?", "orders.a", True),
        ("orders.?", "orders.ab", False),
        ("*", "anything.at.all", True),
        ("orders.reminder", "orders.reminder", True),
        ("orders.reminder", "orders.reminders", False),
        ("orders.[a]", "orders.[a]", True),  # no character classes: brackets are themselves
        ("a+b", "a+b", True),
        ("a+b", "aab", False),
        ("Orders.*", "orders.x", False),  # case-sensitive
    ],
)
def test_globs_are_those_of_failed_list(glob: str, name: str, matches: bool) -> None:
    """``*`` any run, ``?`` one character, the rest literally, matching the whole name."""
    assert bool(glob_regex(glob).fullmatch(name)) is matches


RULES = "*=7d, orders.*=1d, orders.reminder=1h, orders.audit=never, ord*.rem?nder=2h"


@pytest.mark.parametrize(
    ("event_type", "seconds"),
    [
        ("orders.reminder", 3600),  # the exact name, though listed after two globs that match
        ("orders.audit", None),  # never
        ("orders.shipped", 86400),  # orders.* (7 literal characters) over *
        ("ordxx.remender", 7200),  # ord*.rem?nder (11 literal characters) over *
        ("billing.paid", 604800),
    ],
)
def test_the_most_specific_pattern_wins_whatever_the_order(
    event_type: str, seconds: float | None
) -> None:
    assert ExpireAfter.parse(RULES).seconds_for(event_type) == seconds
    reversed_rules = ",".join(reversed(RULES.split(",")))
    assert ExpireAfter.parse(reversed_rules).seconds_for(event_type) == seconds


def test_a_tie_goes_to_the_pattern_listed_first() -> None:
    """``a*`` and ``*a`` are as specific: the first listed decides."""
    assert ExpireAfter.parse("a*=1h,*a=2h").seconds_for("aa") == 3600
    assert ExpireAfter.parse("*a=2h,a*=1h").seconds_for("aa") == 7200


def test_no_rule_means_no_deadline() -> None:
    assert ExpireAfter.parse("orders.*=1h").seconds_for("billing.paid") is None
    assert from_env({}) is None
    assert from_env({"RELAY_EXPIRE_AFTER": "  "}) is None
    assert from_env({"RELAY_EXPIRE_AFTER": "x=1s"}) == ExpireAfter.parse("x=1s")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("orders.reminder", "the part 'orders.reminder' is not PATTERN=DURATION"),
        ("=1h", "the part '=1h' is not PATTERN=DURATION"),
        ("orders.reminder=1x,*=7d", "the part 'orders.reminder=1x': '1x' is not a duration"),
        ("*=7d,*=1d", "the part '*=1d' repeats the pattern '*'"),
        ("x=0s", "the part 'x=0s': the duration must be above 0"),
        ("x=40000d", "is longer than a century"),
    ],
)
def test_a_bad_part_is_refused_naming_the_variable_and_the_part(raw: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        ExpireAfter.parse(raw)
    assert str(info.value).startswith("RELAY_EXPIRE_AFTER: ")
    assert message in str(info.value)


def test_the_producer_checks_a_deadline_before_anything_else() -> None:
    """Exclusive arguments, an aware datetime, a positive finite duration (None: none)."""
    at = datetime(2031, 1, 1, tzinfo=timezone(timedelta(hours=-5)))
    assert check_expiry(at, None) is at
    assert check_expiry(None, timedelta(minutes=2)) == 120.0
    assert check_expiry(None, 1) == 1.0
    assert check_expiry(None, None) is None
    for expires_at, expires_in, field in [
        (at, 5, "expires_at"),
        (datetime(2031, 1, 1), None, "expires_at"),
        (date(2031, 1, 1), None, "expires_at"),
        (None, True, "expires_in"),
        (None, float("inf"), "expires_in"),
        (None, timedelta(0), "expires_in"),
    ]:
        with pytest.raises(EventError) as info:
            check_expiry(expires_at, expires_in)  # type: ignore[arg-type]
        assert info.value.field == field


def test_the_row_binds_its_deadline_counted_from_when_it_is_due() -> None:
    """An explicit time binds ``expires_at``; a duration (given, or the type's default) binds
    seconds after the database's now, the ``delay`` included; none binds nothing."""
    producer = Producer(expire_after=ExpireAfter.parse("orders.*=1h"))
    at = datetime(2031, 1, 1, tzinfo=UTC)
    fixed = producer.event("orders.x", {}, expires_at=at)
    assert (fixed.expiry, fixed.values["expires_at"]) == ("at", at)
    default = producer.event("orders.x", {}, delay=60)
    assert (default.expiry, default.values["expires_seconds"]) == ("in", 3660.0)
    given = producer.event("billing.x", {}, expires_in=30)
    assert (given.expiry, given.values["expires_seconds"]) == ("in", 30.0)
    none = producer.event("billing.x", {})
    assert (none.expiry, "expires_seconds" in none.values) == (None, False)


def _claimed(n: int, headers: dict[str, object] | None = None, **kw: object) -> ClaimedEvent:
    return ClaimedEvent(n, "reminder.due", {}, headers, None, 1, NOW, **kw)  # type: ignore[arg-type]


def test_an_expired_row_is_refused_with_its_deadline_named() -> None:
    """The claim's flag decides (the database's clock); the deadline read becomes the
    reason; a row's defect comes first; other rows go on."""
    deadline = datetime(2026, 12, 7, 5, 0, tzinfo=UTC)
    events = [
        _claimed(1),
        _claimed(2, expired=True, expires_at=deadline),
        _claimed(3, expired=True, expires_at="0000-00-00 00:00:00"),
        _claimed(4, expired=True, expires_at=deadline, defect="payload: not JSON"),
    ]
    refused, expired = refusals(events, max_attempts=5, now=NOW)
    assert [(b.event.id, b.error) for b in refused] == [
        (2, "expired at 2026-12-07T05:00:00Z, before it was published"),
        (3, expired_reason("0000-00-00 00:00:00")),
        (4, "payload: not JSON"),
    ]
    assert [e.id for e in expired] == [2, 3]
    assert "no time Python holds" in expired_reason("0000-00-00 00:00:00")


def test_a_task_without_a_deadline_column_is_checked_against_its_expires_header() -> None:
    """A Celery task row written before rows had a deadline: its ``expires`` header, at
    ``now``, as before (a naive one is UTC)."""
    task = {"headers": {"expires": "2026-12-07T04:59:00"}, "routing_key": "q", "exchange": ""}
    late = _claimed(1, headers={TASK_HEADER: task})
    on_time = _claimed(2, headers={TASK_HEADER: {**task, "headers": {"expires": None}}})
    refused, expired = refusals([late, on_time], max_attempts=5, now=NOW)
    assert [(b.event.id, b.error) for b in refused] == [
        (1, "expired at 2026-12-07T04:59:00Z, before it was published")
    ]
    assert expired == [late]


def test_expired_rows_are_counted_apart_from_other_dead_letters() -> None:
    registry = CollectorRegistry()
    observer = PrometheusObserver(registry)
    late, bad = _claimed(1, expired=True), _claimed(2, defect="x")
    observer.recorded(Recorded((), (), (late, bad), 0, 0, True, (0, 0, 2), expired=(late,)))

    def value(name: str) -> float | None:
        labels = {"source": "", "event_type": "reminder.due"}
        return registry.get_sample_value(name, labels)

    assert (value("relay_events_failed_total"), value("relay_events_expired_total")) == (2, 1)


def test_the_in_memory_store_dead_letters_what_expired_before_its_claim() -> None:
    """``relay.testing``'s doubles: a row added with a deadline that passed (by the store's
    clock) is dead-lettered unpublished by the dispatcher, naming the expiry; the others are
    sent."""
    from relay.config import Settings
    from relay.dispatch.dispatcher import Dispatcher
    from relay.testing import InMemoryPublisher, InMemoryStore

    now = [100.0]
    store = InMemoryStore(clock=lambda: now[0])
    late = store.add("reminder.due", {}, expires_in_seconds=5)
    kept = store.add("reminder.due", {}, expires_in_seconds=60)
    plain = store.add("reminder.due", {})
    now[0] += 10
    publisher = InMemoryPublisher()
    report = Dispatcher(store, publisher, Settings()).drain(budget_seconds=5)
    assert (report.sent, report.buried) == (2, 1)
    assert sorted(m.outbox_id for m in publisher.messages) == [kept, plain]
    assert store.rows[late].status.value == "failed"
    assert (store.rows[late].last_error or "").startswith("expired at ")
