"""The incident levers' pure parts: ``RELAY_RATE_LIMITS`` parsing, the token bucket's
arithmetic, and what a set of pauses holds back."""

from __future__ import annotations

import pytest

from relay.config.rate_limits import RateLimit, parse, refilled, rest_seconds, takeable
from relay.exceptions import ConfigError
from relay.store.dispatch_path.holds import NO_HOLD, Hold, Pauses, is_glob


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, ()),
        ("", ()),
        ("T=50/s", (RateLimit("T", 50.0),)),
        (
            " orders.* = 2.5 / s , mail.?=1/s,",
            (RateLimit("orders.*", 2.5), RateLimit("mail.?", 1.0)),
        ),
    ],
)
def test_rate_limits_parse(raw: str | None, expected: tuple[RateLimit, ...]) -> None:
    """Items in the order given, spaces and a trailing comma allowed."""
    assert parse(raw) == expected


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ("T=50", "'T=50'"),
        ("T=50/m", "'T=50/m'"),
        ("=5/s", "'=5/s'"),
        ("a=1/s,b=-1/s", "'b=-1/s'"),
        ("a=0/s", "'a=0/s'"),
        ("a b=1/s", "'a b=1/s'"),
    ],
)
def test_a_bad_item_is_refused_naming_it(raw: str, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(raw)
    assert "RELAY_RATE_LIMITS" in str(info.value)
    assert named in str(info.value)


@pytest.mark.parametrize(
    ("tokens", "elapsed", "rate", "expected"),
    [
        (0.0, 0.5, 10.0, 5.0),  # refilled by rate * elapsed
        (3.0, 10.0, 10.0, 10.0),  # capped at the burst: one second's worth
        (2.0, -3.0, 10.0, 2.0),  # a clock that went back adds nothing
        (0.0, 5.0, 0.5, 1.0),  # a slow rate still holds one whole token
    ],
)
def test_refill(tokens: float, elapsed: float, rate: float, expected: float) -> None:
    assert refilled(tokens, elapsed, RateLimit("T", rate)) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("tokens", "wanted", "taken"),
    [(0.99, 10, 0), (1.0, 10, 1), (7.6, 10, 7), (50.0, 10, 10), (2.9999999999, 5, 3)],
)
def test_a_claim_takes_whole_tokens(tokens: float, wanted: int, taken: int) -> None:
    assert takeable(tokens, wanted) == taken


def test_rest_until_a_tenth_of_a_second_worth_is_back() -> None:
    """Empty at 50/s: rest 0.1 s (5 tokens); a slow rate waits for one token; none when the
    bucket still holds enough."""
    assert rest_seconds(0.0, RateLimit("T", 50.0)) == pytest.approx(0.1)
    assert rest_seconds(0.5, RateLimit("T", 0.5)) == pytest.approx(1.0)
    assert rest_seconds(8.0, RateLimit("T", 50.0)) == 0.0


def test_pauses_from_rows_make_one_hold_whatever_their_order() -> None:
    a = Pauses.from_rows([("key", "k2"), ("event_type", "mail.*"), ("key", "k1")])
    b = Pauses.from_rows([("key", "k1"), ("key", "k2"), ("event_type", "mail.*")])
    assert a == b
    assert a.hold() == Hold(("mail.*",), ("k1", "k2"))
    assert not a.database
    assert Pauses.from_rows([("database", "orders")]).database
    assert not Pauses.from_rows([]).hold()
    assert Hold() == NO_HOLD


def test_a_hold_adds_types_once() -> None:
    hold = Hold(("a",), ("k",))
    assert hold.also(["a", "b.*"]) == Hold(("a", "b.*"), ("k",))
    assert hold.also(["a"]) is hold


@pytest.mark.parametrize(("pattern", "glob"), [("a.b", False), ("a.*", True), ("a?", True)])
def test_is_glob(pattern: str, glob: bool) -> None:
    assert is_glob(pattern) is glob
