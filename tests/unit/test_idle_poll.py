"""The adaptive poll's waits: the floor after activity, doubling to the tick while idle."""

from __future__ import annotations

from relay.wakeup.polling import IdlePoll


def test_waits_start_at_the_ceiling_and_return_to_it_after_activity() -> None:
    """Idle from the start: one look per tick. After rows were found: floor, then doubling,
    capped at the tick, so a burst costs about log2(tick / floor) extra looks."""
    poll = IdlePoll(0.025, 1.0)
    assert [poll.next() for _ in range(2)] == [1.0, 1.0]
    poll.reset()
    waits = [poll.next() for _ in range(9)]
    assert waits == [0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]


def test_a_floor_equal_to_the_ceiling_polls_at_the_tick() -> None:
    """RELAY_POLL_FLOOR_SECONDS = RELAY_TICK_SECONDS turns adaptive polling into the plain tick."""
    poll = IdlePoll(2.0, 2.0)
    poll.reset()
    assert {poll.next() for _ in range(5)} == {2.0}


def test_hold_keeps_the_floor_for_that_many_looks_after_activity() -> None:
    """With hold=3: after rows were seen, four looks at the floor (the first and three held),
    then doubling as before."""
    poll = IdlePoll(0.1, 1.0, hold=3)
    poll.reset()
    assert [poll.next() for _ in range(8)] == [0.1, 0.1, 0.1, 0.1, 0.2, 0.4, 0.8, 1.0]
