"""share_fanout: a claim for each database with work before a second; RELAY_MAX_FANOUT holds."""

from __future__ import annotations

import pytest

from relay.celery.many_databases import CountPlan, share_fanout


@pytest.mark.parametrize(
    ("backlogs", "max_fanout", "expected"),
    [
        # Idle everywhere: no task at all.
        ({"a": 0, "b": 0}, 8, ()),
        # A million-row backlog beside ten events: the quiet one is served in the first round.
        (
            {"big": 1_000_000, "quiet": 10},
            8,
            ("big", "quiet", "big", "big", "big", "big", "big", "big"),
        ),
        # Demand below the share: each gets what it wants, nothing more.
        ({"a": 150, "b": 50}, 8, ("a", "b", "a")),
        # Rounds interleave the queue: a, b, c, then a and b again.
        ({"a": 500, "b": 200, "c": 100}, 5, ("a", "b", "c", "a", "b")),
        # One database alone takes the whole fan-out.
        ({"a": 10_000}, 3, ("a", "a", "a")),
    ],
)
def test_table(backlogs: dict[str, int], max_fanout: int, expected: tuple[str, ...]) -> None:
    """The sends for a tick, from the table (batch size 100)."""
    assert share_fanout(backlogs, 100, max_fanout) == expected


def test_never_more_than_max_fanout() -> None:
    """RELAY_MAX_FANOUT holds overall, whatever the backlogs."""
    backlogs = {f"db{i}": 10_000 for i in range(12)}
    assert len(share_fanout(backlogs, 100, 8)) == 8


def test_more_databases_with_work_than_tasks_rotate_by_turn() -> None:
    """With fewer tasks than databases with work, successive ticks serve every database."""
    backlogs = {f"db{i}": 5 for i in range(5)}
    served: set[str] = set()
    for turn in range(3):
        sends = share_fanout(backlogs, 100, 2, turn=turn)
        assert len(sends) == 2
        served.update(sends)
    assert served == set(backlogs)


def test_bad_arguments_are_refused() -> None:
    """A batch size or fan-out below 1 is a programming error, refused."""
    with pytest.raises(ValueError, match="must be >= 1"):
        share_fanout({"a": 1}, 0, 8)


def test_the_count_plan_counts_what_moved_what_is_unknown_and_each_database_at_its_net() -> None:
    """A tick counts a database whose written-rows figure moved or is unknown (not
    PostgreSQL, a server that did not answer), one whose last count found rows (until a
    count finds it empty), and every database once per net."""
    plan = CountPlan(net=10.0)
    names = ["pg1", "pg2", "lite"]
    first = {"pg1": 5, "pg2": 7}
    assert plan.choose(names, first, 0.0) == names  # never counted: all
    assert plan.due_for_net("pg1", 0.0)
    plan.counted({"pg1": 0, "pg2": 0, "lite": 0}, first, 0.0)
    assert not plan.due_for_net("pg1", 1.0)
    assert plan.choose(names, first, 1.0) == ["lite"]  # nothing moved: the unknown only
    moved = {"pg1": 5, "pg2": 8}
    assert plan.choose(names, moved, 2.0) == ["pg2", "lite"]
    plan.counted({"pg2": 300, "lite": 0}, moved, 2.0)  # pg2 has a backlog
    assert plan.choose(names, moved, 3.0) == ["pg2", "lite"]  # counted until found empty
    plan.counted({"pg2": 0, "lite": 0}, moved, 3.0)
    assert plan.choose(names, moved, 4.0) == ["lite"]
    assert plan.choose(names, {"pg2": 8}, 4.0) == ["pg1", "lite"]  # pg1's server silent
    assert plan.choose(names, moved, 10.0) == names  # the net
