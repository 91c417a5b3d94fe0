"""Argument parsing of the ``relay`` command."""

from __future__ import annotations

import argparse

import pytest

from relay.commands import build_parser, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("15m", 900), ("12h", 43200), ("7d", 604800), ("1.5h", 5400)],
)
def test_durations(text: str, seconds: float) -> None:
    """--older-than accepts bare seconds and s/m/h/d/w suffixes."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7 days", "-1d", "1y", "d"])
def test_bad_durations_are_refused(text: str) -> None:
    """Anything else is an argument error naming the value."""
    with pytest.raises(argparse.ArgumentTypeError, match="duration"):
        parse_duration(text)


def test_dispatch_needs_a_mode() -> None:
    """`relay dispatch` must say --once or --loop."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["dispatch"])
