"""When the PostgreSQL wake-up looks (WatchPace, issue 51): the floor after activity, doubling
to the idle ceiling while nothing moves, and the tick's claim taking one idle look's place.
Times are readings passed in; nothing here waits."""

from __future__ import annotations

import math

import pytest

from relay.wakeup.polling import WatchPace


def _idle_looks(pace: WatchPace, start: float, count: int) -> list[float]:
    """The times of ``count`` looks that see nothing, each made when due."""
    times, at = [], start
    for _ in range(count):
        pace.looked(at, active=False)
        at = pace.due()
        times.append(round(at, 6))
    return times


def test_the_first_look_is_due_at_once() -> None:
    """A watcher that never looked looks at once (rows committed before it started)."""
    assert WatchPace(0.025, 0.25).due() == -math.inf


@pytest.mark.parametrize(
    ("floor", "ceiling", "waits"),
    [
        (0.025, 0.25, [0.025, 0.05, 0.1, 0.2, 0.25, 0.25, 0.25]),
        (0.025, 0.025, [0.025] * 7),  # RELAY_WATCH_IDLE_SECONDS = the floor: the former pace
        (0.1, 1.0, [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]),
    ],
)
def test_after_activity_the_wait_doubles_from_the_floor_to_the_ceiling(
    floor: float, ceiling: float, waits: list[float]
) -> None:
    """A look that saw the sequence move resets the wait to the floor; each look that saw
    nothing doubles it, capped at the idle ceiling."""
    pace = WatchPace(floor, ceiling)
    pace.looked(0.0, active=True)
    seen = [pace.wait]
    at = 0.0
    for _ in range(len(waits) - 1):
        at = pace.due()
        pace.looked(at, active=False)
        seen.append(pace.wait)
    assert seen == pytest.approx(waits)


def test_activity_while_idle_returns_to_the_floor() -> None:
    """A move seen at the ceiling brings the next look back to the floor."""
    pace = WatchPace(0.025, 0.25)
    _idle_looks(pace, 0.0, 10)
    assert pace.wait == 0.25
    pace.looked(5.0, active=True)
    assert pace.due() == pytest.approx(5.025)


def test_idle_looks_come_one_ceiling_apart_without_claims() -> None:
    """Idle with no claim to count on: four looks a second at a 0.25 s ceiling."""
    pace = WatchPace(0.25, 0.25)
    assert _idle_looks(pace, 0.0, 4) == pytest.approx([0.25, 0.5, 0.75, 1.0])


def test_a_claim_counts_as_a_look() -> None:
    """A claim started between two looks: the next look is one wait after the claim."""
    pace = WatchPace(0.25, 0.25)
    pace.looked(0.0, active=False)
    pace.covered(0.1)
    assert pace.due() == pytest.approx(0.35)


def test_the_tick_claim_takes_the_place_of_the_look_due_with_it() -> None:
    """Claims every second (the tick) and looks every 0.25 s after the last claim: the look
    that would come with the next claim is left to it, so an idle second costs three looks
    and one claim, not four looks and a claim."""
    pace = WatchPace(0.25, 0.25, period=1.0, slack=0.02)
    pace.looked(-0.1, active=False)
    pace.covered(0.0)
    looks = []
    at = pace.due()
    while at < 2.0:
        if at >= 1.005 and pace.last_cover == 0.0:
            pace.covered(1.005)  # the claim, 5 ms after its predicted time
            at = pace.due()
            continue
        pace.looked(at, active=False)
        looks.append(round(at, 3))
        at = pace.due()
    assert looks == [0.25, 0.5, 0.75, 1.255, 1.505, 1.755]


@pytest.mark.parametrize("late", [0.0, 0.01, -0.01])
def test_a_look_within_the_slack_of_the_predicted_claim_is_skipped(late: float) -> None:
    """The look due at the predicted claim (either side, within the slack) waits for it."""
    pace = WatchPace(0.25, 0.25, period=1.0, slack=0.02)
    pace.covered(0.0)
    pace.looked(0.75 + late, active=False)
    assert pace.due() == pytest.approx(1.25)


def test_a_claim_far_from_the_look_does_not_move_it() -> None:
    """A claim predicted well after the next look leaves the look where it was."""
    pace = WatchPace(0.25, 0.25, period=1.0, slack=0.02)
    pace.covered(0.0)
    pace.looked(0.25, active=False)
    assert pace.due() == pytest.approx(0.5)


def test_without_a_period_claims_only_push_looks_back() -> None:
    """No tick expected (period None): nothing is skipped, a claim only counts as a look."""
    pace = WatchPace(0.25, 0.25)
    pace.covered(0.0)
    pace.looked(0.75, active=False)
    assert pace.due() == pytest.approx(1.0)


def test_the_floor_is_held_after_activity_before_backing_off() -> None:
    """hold=1 s: looks stay at the floor for a second after the last move, then double."""
    pace = WatchPace(0.125, 0.5, hold=1.0)
    pace.looked(0.0, active=True)
    looks = _idle_looks(pace, 0.125, 10)
    assert looks == pytest.approx([0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0, 1.25, 1.75, 2.25])
