"""The many-databases scheduler (relay.runners.many.schedule): fair order, due times, budget."""

from __future__ import annotations

import pytest

from relay.runners.many.schedule import (
    COLD_POLL_SECONDS,
    WARM_LOOKS_PER_SECOND,
    WARM_POLL_SECONDS,
    WARM_SECONDS,
    Schedule,
    Unit,
)


def _schedule(names: str = "abc", slots: int = 2, per_server: int = 2) -> Schedule:
    s = Schedule(slots, per_server)
    for name in names:
        s.add(name, "db1:5432", 0.025, 1.0, now=0.0)
    return s


def _run(s: Schedule, name: str, unit: Unit, started: float, now: float) -> bool:
    t = s.entries[name]
    assert s.evictable(t) is True
    s.start(t)
    keep = s.finish(t, unit, started, now)
    if not keep:
        s.release(t)
    return keep


def test_every_database_is_due_at_start_in_the_order_given() -> None:
    """A relay that starts looks at every database at once: rows may have waited meanwhile."""
    s = _schedule()
    assert [t.name for t in s.ready(0.0)] == ["a", "b", "c"]


def test_the_least_served_database_goes_first() -> None:
    """After a noisy database ran a long unit with rows left, the others come before it."""
    s = _schedule()
    _run(s, "a", Unit(claimed=1000, drained=False), started=0.0, now=0.25)
    assert [t.name for t in s.ready(0.25)] == ["b", "c", "a"]


def test_a_noisy_backlog_never_holds_more_than_one_worker() -> None:
    """A database runs one unit at a time: while it runs it is not ready again."""
    s = _schedule()
    s.start(s.entries["a"])
    assert "a" not in [t.name for t in s.ready(0.0)]


def test_a_database_back_from_a_quiet_spell_banks_no_credit() -> None:
    """A database idle while another ran for minutes starts level with the running ones, so it
    cannot hold the workers for minutes in turn once it has a backlog."""
    s = _schedule("ab")
    s.entries["a"].served = 300.0
    s.start(s.entries["a"])
    s.start(s.entries["b"])
    assert s.entries["b"].served == 300.0


def test_an_idle_database_backs_off_and_a_wake_up_makes_it_due_at_once() -> None:
    """Empty looks double the wait up to the ceiling; a wake-up resets it and makes it due."""
    s = _schedule("a")
    waits = []
    now = 0.0
    for _ in range(8):
        _run(s, "a", Unit(), started=now, now=now)
        waits.append(round(s.entries["a"].due_at - now, 3))
        now = s.entries["a"].due_at
    assert waits[-1] == 1.0
    assert waits == sorted(waits)
    s.wake(["a"], now - 0.5)
    assert s.entries["a"].due_at == now - 0.5
    assert s.entries["a"].poll.next() == 0.025


def test_rows_found_keep_the_connection_and_poll_from_the_floor() -> None:
    """A unit that claimed rows parks its connection and looks again after the floor."""
    s = _schedule("a")
    assert _run(s, "a", Unit(claimed=5, drained=True), started=0.0, now=0.1) is True
    assert s.entries["a"].due_at == pytest.approx(0.125)
    assert s.in_use() == 1
    assert _run(s, "a", Unit(), started=0.125, now=0.13) is False  # found nothing: closed


def test_an_outage_rests_the_database_and_closes_its_connection() -> None:
    """A broker outage's rest (or a failed unit) delays that database alone."""
    s = _schedule("ab")
    assert _run(s, "a", Unit(claimed=10, drained=True, rest=2.0), 0.0, 0.1) is False
    assert s.entries["a"].due_at == pytest.approx(2.1)
    s.start(s.entries["b"])
    s.failed(s.entries["b"], 5.0, now=0.2)
    assert s.entries["b"].due_at == pytest.approx(5.2)
    assert [t.name for t in s.ready(1.0)] == []


@pytest.mark.parametrize(
    ("holding", "running", "expected"),
    [
        ((), (), True),  # a free slot
        (("a",), (), True),  # one held, one free
        (("a", "b"), ("a", "b"), None),  # both running: wait
        (("a", "b"), ("a",), "b"),  # b parked: its slot is taken back
    ],
)
def test_the_budget_hands_out_free_slots_then_parked_ones(
    holding: tuple[str, ...], running: tuple[str, ...], expected: object
) -> None:
    """Two slots: a third database gets a free one, else the oldest parked connection's."""
    s = _schedule("abc")
    for i, name in enumerate(holding):
        t = s.entries[name]
        t.holding, t.running, t.parked_at = True, name in running, float(i)
    got = s.evictable(s.entries["c"])
    assert (got.name if hasattr(got, "name") else got) == expected


def test_the_per_server_budget_takes_back_a_slot_of_the_same_server_only() -> None:
    """Per server at most ``per_server``: a full server's database waits for one of its own."""
    s = Schedule(slots=4, per_server=1)
    s.add("a", "one:5432", 0.025, 1.0, now=0.0)
    s.add("b", "two:5432", 0.025, 1.0, now=0.0)
    s.add("c", "one:5432", 0.025, 1.0, now=0.0)
    for name in "ab":
        s.entries[name].holding = True
    got = s.evictable(s.entries["c"])
    assert getattr(got, "name", None) == "a"
    s.entries["a"].running = True
    assert s.evictable(s.entries["c"]) is None
    assert s.in_use("one:5432") == 1
    assert s.in_use() == 2


def test_a_drained_watched_database_waits_for_a_wake_up_or_the_warm_poll() -> None:
    """Watched (PostgreSQL): a drained database is looked at again after WARM_POLL_SECONDS
    while it had rows lately (no cascade of quick looks: new rows wake it), after
    COLD_POLL_SECONDS once quiet for WARM_SECONDS, and it gives its connection back."""
    s = Schedule(2, 2)
    s.add("a", "db1:5432", 0.025, 1.0, now=0.0, watched=True)
    t = s.entries["a"]
    assert _run(s, "a", Unit(claimed=1), 0.0, 0.0) is False
    assert t.due_at == WARM_POLL_SECONDS
    now = WARM_SECONDS + 1.0
    _run(s, "a", Unit(), now, now)
    assert t.due_at == now + COLD_POLL_SECONDS


def test_a_wake_up_during_a_unit_makes_the_database_due_when_it_ends() -> None:
    """Rows committed after the unit's claim: their wake-up comes while it runs; the unit's
    end must not push the next look out to the warm poll (it would wait up to seconds)."""
    s = Schedule(2, 2)
    s.add("a", "db1:5432", 0.025, 1.0, now=0.0, watched=True)
    t = s.entries["a"]
    s.start(t)
    s.wake(["a"], now=0.01)
    assert s.finish(t, Unit(claimed=1), 0.0, 0.02) is False
    assert t.due_at == 0.02


def test_the_warm_poll_backs_off_while_the_wake_ups_carry_the_rows() -> None:
    """Watched: each look of the warm poll that finds nothing doubles its wait, up to the cold
    poll; units the wake-ups started leave it alone; a look that finds rows the wake-ups
    missed (late statistics) brings it back to WARM_POLL_SECONDS."""
    s = Schedule(2, 2)
    s.add("a", "db1:5432", 0.025, 1.0, now=0.0, watched=True)
    t = s.entries["a"]
    now = 0.0
    _run(s, "a", Unit(claimed=1), now, now)  # the first look at start: a poll, found rows
    assert t.due_at == now + WARM_POLL_SECONDS
    waits = []
    for _ in range(6):
        now = t.due_at
        s.wake(["a"], now)  # a row, announced: this unit does not count as a look
        _run(s, "a", Unit(claimed=1), now, now)
        now = t.due_at
        _run(s, "a", Unit(), now, now)  # the poll's look: nothing the wake-up had not sent
        waits.append(t.due_at - now)
    assert waits == [min(COLD_POLL_SECONDS, WARM_POLL_SECONDS * 2**k) for k in range(1, 7)], waits
    now = t.due_at
    _run(s, "a", Unit(claimed=1), now, now)  # this look found rows: statistics came late
    assert t.due_at == now + WARM_POLL_SECONDS


def test_a_database_known_to_have_rows_goes_before_a_poll() -> None:
    """When more databases are due than workers: one woken (rows committed) or left with rows
    runs before one whose look is only a poll, even one served less; among the known ones,
    the least served first."""
    s = Schedule(9, 9)
    for name in ("polled", "woken", "left"):
        s.add(name, "db1:5432", 0.025, 1.0, now=0.0, watched=True)
    _run(s, "polled", Unit(), 0.0, 0.01)  # drained: its next look is the net's poll
    _run(s, "woken", Unit(claimed=1), 0.0, 0.5)  # served more
    _run(s, "left", Unit(claimed=100, drained=False), 0.0, 0.3)  # rows left: due at once
    now = 60.0
    s.wake(["woken"], now)
    assert [t.name for t in s.ready(now)] == ["left", "woken", "polled"]
    assert s.entries["polled"].served < s.entries["left"].served


def test_many_warm_databases_share_the_looks() -> None:
    """200 warm watched databases: each looked at every 200 / WARM_LOOKS_PER_SECOND s, so
    their looks stay at WARM_LOOKS_PER_SECOND a second in all."""
    s = Schedule(9, 9)
    for i in range(200):
        s.add(f"t{i}", "db1:5432", 0.025, 1.0, now=0.0, watched=True)
    _run(s, "t0", Unit(claimed=1), 0.0, 1.0)
    assert s.entries["t0"].due_at == pytest.approx(1.0 + 200 / WARM_LOOKS_PER_SECOND)


def test_waiting_counts_the_due_databases_not_running() -> None:
    """The metric of databases waiting for a worker or a connection."""
    s = _schedule("abc")
    s.start(s.entries["a"])
    assert s.waiting(0.0) == 2
    assert s.next_due() == 0.0
