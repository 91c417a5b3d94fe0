"""The console's credentials, sessions, CSRF tokens, masking and chart scaling; no network."""

from __future__ import annotations

import pytest

from relay.config import Settings
from relay.console import charts
from relay.console.auth import OPERATOR, VIEWER, Guard, csrf_ok
from relay.console.views import MASK, BadRequest, masked, read_filter
from relay.exceptions import ConfigError
from relay.records import Status

OP, RO = "o" * 20, "r" * 20


def test_each_token_grants_its_role_and_nothing_else_grants_any() -> None:
    """The operator token acts, the view-only one views; a prefix, a longer string, another
    case or an empty string grants nothing."""
    guard = Guard(OP, RO)
    assert guard.role_of(OP) == OPERATOR
    assert guard.role_of(RO) == VIEWER
    for wrong in ("", OP[:-1], OP + "o", OP.upper(), "Bearer " + OP):
        assert guard.role_of(wrong) is None
    operator, viewer = guard.bearer(f"Bearer {OP}", None), guard.bearer(f"bearer {RO}", "cron")
    assert operator is not None
    assert operator.may_act
    assert viewer is not None
    assert (viewer.may_act, viewer.name, viewer.via) == (False, "cron", "api")
    assert guard.bearer(f"Basic {OP}", None) is None
    assert Guard(OP, None).role_of(RO) is None


def test_session_is_signed_expires_and_follows_its_token() -> None:
    """A session cookie reads back with its role and name; tampered, expired, or signed under
    a token that has since changed, it is no credential."""
    guard = Guard(OP, RO)
    cookie = guard.issue(VIEWER, "ada", now=1000.0)
    cred = guard.session(cookie, now=1001.0)
    assert cred is not None
    assert (cred.role, cred.name, cred.via) == (VIEWER, "ada", "console")
    assert guard.session(cookie, now=1000.0 + 13 * 3600) is None
    payload, _, sig = cookie.rpartition(".")
    forged = payload.replace(payload[5], "A" if payload[5] != "A" else "B", 1) + "." + sig
    assert guard.session(forged, now=1001.0) is None
    flipped = cookie[:-1] + ("0" if cookie[-1] != "0" else "1")
    assert guard.session(flipped, now=1001.0) is None
    assert Guard(OP, "x" * 20).session(cookie, now=1001.0) is None
    assert guard.session("garbage", now=1001.0) is None


def test_csrf_token_belongs_to_one_session() -> None:
    """Each session has its own CSRF token; a bearer credential has none."""
    guard = Guard(OP, RO)
    one = guard.session(guard.issue(OPERATOR, "a"))
    two = guard.session(guard.issue(OPERATOR, "a"))
    assert one is not None
    assert two is not None
    assert csrf_ok(one, one.csrf)
    assert not csrf_ok(one, two.csrf)
    assert not csrf_ok(one, None)
    bearer = guard.bearer(f"Bearer {OP}", None)
    assert bearer is not None
    assert not csrf_ok(bearer, "")


def test_masking_reaches_every_depth_in_any_case() -> None:
    """Named fields are masked in nested mappings and lists; others are kept."""
    value = {"Password": "p", "user": {"card_number": 1, "name": "n"}, "list": [{"password": 2}]}
    assert masked(value, frozenset({"password", "card_number"})) == {
        "Password": MASK,
        "user": {"card_number": MASK, "name": "n"},
        "list": [{"password": MASK}],
    }
    assert masked(value, frozenset()) is value


def test_filter_from_a_request() -> None:
    """Query values and JSON bodies become the shared EventFilter; bad ones are refused."""
    f = read_filter({"status": "failed,sent", "event_type": " order.* ", "ids": [1, 2]})
    assert f.statuses == (Status.FAILED, Status.SENT)
    assert (f.event_type, f.ids, f.all) == ("order.*", (1, 2), False)
    assert read_filter({"all": True}).all
    assert not read_filter({"all": "yes please"}).all
    for bad in ({"status": "lost"}, {"ids": "a,b"}, {"key": 5}, {"since": "soon"}):
        with pytest.raises(BadRequest):
            read_filter(bad)


def test_chart_scales_to_its_peak() -> None:
    """Sixty bars, oldest minute on the left, the peak at full height, empty minutes flat."""
    chart = charts.per_minute(
        [{"minutes_ago": 0, "sent": 10}, {"minutes_ago": 59, "sent": 5}], "sent", "t", "events"
    )
    assert len(chart.bars) == 60
    assert chart.bars[-1].height == charts.HEIGHT - 4
    assert chart.bars[0].height == pytest.approx((charts.HEIGHT - 4) / 2)
    assert chart.bars[30].height == 0


def test_console_settings() -> None:
    """The two tokens must differ; describe() never shows a token."""
    with pytest.raises(ConfigError, match="must differ"):
        Settings(console_token=OP, console_readonly_token=OP)
    shown = Settings(console_token=OP, console_readonly_token=RO).describe()
    assert shown["console_token"] == shown["console_readonly_token"] == "***"
    assert OP not in str(shown)
    assert Settings(console_redact=" Password , card_number").console_redact_fields == {
        "password",
        "card_number",
    }


@pytest.mark.parametrize("given", ["é" * 64, "\ud800", "", "x" * 10_000, "\x00"])
def test_strange_credentials_are_refused_not_errors(given: str) -> None:
    """A token, CSRF value, cookie signature or sign-in code that is not ASCII (or not even
    encodable) is compared as bytes and refused, never an exception (a 500)."""
    guard = Guard(OP, RO, signin_code="c" * 32)
    assert guard.role_of(given) is None
    assert guard.redeem(given) is None
    assert guard.session(f"payload.{given}") is None
    cred = guard.session(guard.issue(OPERATOR, "ada"))
    assert cred is not None
    assert not csrf_ok(cred, given)
    assert guard.redeem("c" * 32) == OPERATOR
    assert guard.redeem("c" * 32) is None


def test_names_are_cleaned_for_the_audit() -> None:
    from relay.console.auth import clean_name

    assert clean_name("  ada\x00\ud800\n ", "api") == "ada"
    assert clean_name("\x07", "api") == "api"
    assert len(clean_name("n" * 1000, "api")) == 255
