"""Pure policy: backoff table, retry decisions, the broker circuit breaker, claim sizes, the
purge's pacing, the sweep of expired leases, the PostgreSQL wake-up's rule."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from relay.dispatch.batching import BatchSizer
from relay.dispatch.decisions import CircuitBreaker, RetryPolicy
from relay.policy import Backoff, backoff_seconds
from relay.records import Buried, ClaimedEvent, Rescheduled
from relay.retention.pacing import PurgePacing
from relay.store.dispatch_path.lease_sweep import LeaseSweep
from relay.wakeup.polling import SequenceWatch


class _MaxRandom(random.Random):
    """Always draws the top of the range, so the ceiling shows."""

    def uniform(self, a: float, b: float) -> float:
        return b


@pytest.mark.parametrize(
    ("attempt", "base", "cap", "ceiling"),
    [
        (1, 1.0, 300.0, 1.0),
        (2, 1.0, 300.0, 2.0),
        (3, 1.0, 300.0, 4.0),
        (9, 1.0, 300.0, 256.0),
        (10, 1.0, 300.0, 300.0),
        (4, 0.5, 300.0, 4.0),
        (1_000_000, 1.0, 300.0, 300.0),
        (2_000, 1e300, 1e308, 1e308),
    ],
)
def test_backoff_ceiling_doubles_and_is_capped(
    attempt: int, base: float, cap: float, ceiling: float
) -> None:
    """The jitter range's top is min(cap, base * 2**(attempt-1)), with no overflow."""
    assert backoff_seconds(attempt, base=base, cap=cap, rng=_MaxRandom()) == ceiling


def test_backoff_is_full_jitter_within_range() -> None:
    """Draws spread over [0, ceiling], not clustered at the ceiling."""
    rng = random.Random(7)
    draws = [backoff_seconds(5, base=1.0, cap=300.0, rng=rng) for _ in range(2000)]
    assert min(draws) >= 0.0
    assert max(draws) <= 16.0
    assert min(draws) < 1.0
    assert max(draws) > 15.0


def test_backoff_rejects_attempt_zero() -> None:
    """Attempts are 1-based: a claim always increments first."""
    with pytest.raises(ValueError, match="attempt"):
        backoff_seconds(0, base=1, cap=2, rng=random.Random())


def _event(attempt: int) -> ClaimedEvent:
    return ClaimedEvent(1, "t", {}, None, None, attempt, datetime(2026, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "outcome"),
    [(1, 3, Rescheduled), (2, 3, Rescheduled), (3, 3, Buried), (4, 3, Buried), (1, 1, Buried)],
)
def test_retry_policy_buries_on_the_last_attempt(
    attempt: int, max_attempts: int, outcome: type
) -> None:
    """A failure with attempts left reschedules; the last one dead-letters, keeping the error."""
    result = RetryPolicy(max_attempts, 1.0, 10.0).after_failure(
        _event(attempt), "nack", random.Random(1)
    )
    assert isinstance(result, outcome)
    assert result.error == "nack"


def test_circuit_breaker_opens_doubles_and_closes() -> None:
    """Consecutive broker failures back off exponentially (capped); one success closes it."""
    breaker = CircuitBreaker(base_seconds=1.0, cap_seconds=5.0)
    assert breaker.allows(0.0)
    assert breaker.record_failure(10.0) == 1.0
    assert not breaker.allows(10.5)
    assert breaker.allows(11.0)
    assert breaker.record_failure(11.0) == 2.0
    assert breaker.record_failure(13.0) == 4.0
    assert breaker.record_failure(17.0) == 5.0
    assert breaker.remaining(20.0) == 2.0
    breaker.record_success()
    assert breaker.allows(20.0)
    assert breaker.record_failure(30.0) == 1.0


def test_claims_grow_while_full_and_start_again_after_a_short_one() -> None:
    """A backlog is claimed in batches doubling up to the most; a short claim (the backlog is
    gone) starts again from the batch size, so a trickle stays in small batches."""
    sizer = BatchSizer(first=100, most=1000)
    sizes = []
    for got in (100, 200, 400, 800, 1000, 1000, 37, 100, 5):
        sizes.append(sizer.size)
        sizer.claimed(sizer.size, got)
    assert sizes == [100, 200, 400, 800, 1000, 1000, 1000, 100, 200]
    assert sizer.size == 100


def test_claims_never_grow_when_the_most_is_the_batch_size() -> None:
    """``RELAY_BATCH_MAX`` equal to ``RELAY_BATCH_SIZE`` (the default when the size was set)
    keeps every claim at the size chosen."""
    sizer = BatchSizer(first=50, most=50)
    for _ in range(5):
        sizer.claimed(sizer.size, sizer.size)
        assert sizer.size == 50


@pytest.mark.parametrize(
    ("first", "most", "tries", "waits"),
    [
        (0.1, 5.0, 4, [0.1, 0.2, 0.4, 0.8]),
        (0.1, 0.3, 4, [0.1, 0.2, 0.3, 0.3]),
        (1.0, 1.0, 3, [1.0, 1.0, 1.0]),
    ],
)
def test_retry_loop_waits_double_up_to_the_cap(
    first: float, most: float, tries: int, waits: list[float]
) -> None:
    """A process-level retry loop waits first, then twice as long each time, never past most."""
    backoff = Backoff(first, most)
    assert [backoff.next() for _ in range(tries)] == pytest.approx(waits)


def test_retry_loop_waits_start_again_after_a_success() -> None:
    """After reset (a try succeeded) the next failure waits the first wait again."""
    backoff = Backoff(0.5, 8.0)
    for _ in range(5):
        backoff.next()
    backoff.reset()
    assert backoff.next() == 0.5


@pytest.mark.parametrize(
    ("size", "elapsed", "expected"),
    [
        (1000, 0.05, 2000),  # twice as fast as the target: double
        (1000, 0.01, 2000),  # much faster: at most double
        (1000, 0.1, 1000),  # on target: keep
        (4000, 0.4, 2000),  # much slower: at most halve
        (8000, 0.01, 10_000),  # never above the maximum
        (1500, 1.0, 1000),  # never below the minimum
        (1000, 0.0, 2000),  # a batch too quick to time: grow
    ],
)
def test_purge_batches_are_sized_toward_the_target_transaction_length(
    size: int, elapsed: float, expected: int
) -> None:
    """The purge's next batch scales toward a ~0.1 s transaction, by at most 2x, in bounds."""
    assert PurgePacing().next_batch(size, elapsed) == expected


@pytest.mark.parametrize(
    ("duty", "elapsed", "pause"), [(0.5, 0.1, 0.1), (0.25, 0.1, 0.3), (1.0, 0.1, 0.0)]
)
def test_the_purge_rests_to_keep_its_duty_cycle(duty: float, elapsed: float, pause: float) -> None:
    """After a batch the purger rests so that it deletes only ``duty`` of its time."""
    assert PurgePacing(duty=duty).pause(elapsed) == pytest.approx(pause)


@pytest.mark.parametrize(
    ("duty", "lag", "expected"),
    [
        (0.5, None, 0.5),  # nothing pending: full duty
        (0.5, 0.5, 0.5),  # at the threshold: no yield
        (0.5, 0.51, 0.25),  # later than it: halved
        (0.25, 30.0, 0.125),
        (0.05, 30.0, 0.05),  # never below the floor
        (0.07, 30.0, 0.05),
        (0.05, 0.1, 0.1),  # on time again: doubled back
        (0.4, 0.0, 0.5),  # up to the policy's duty, no further
    ],
)
def test_the_purge_yields_its_duty_while_delivery_is_late(
    duty: float, lag: float | None, expected: float
) -> None:
    """Delivery later than 0.5 s halves the purge's duty down to 5%; on time, it doubles back
    up to half."""
    assert PurgePacing().next_duty(duty, lag) == pytest.approx(expected)


def test_a_yielding_purge_rests_longer_after_the_same_batch() -> None:
    """At 5% duty the purger rests 19 times as long as a batch took, at 50% as long."""
    pacing = PurgePacing()
    assert pacing.pause(0.1, pacing.min_duty) == pytest.approx(1.9)
    assert pacing.pause(0.1) == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("looks", "expected"),
    [
        ([0.0], [True]),  # the first claim always sweeps
        ([0.0, 0.5, 0.99], [True, False, False]),
        ([0.0, 1.0, 1.5, 2.0], [True, True, False, True]),
        ([0.0, 10.0, 10.1], [True, True, False]),  # a long rest: the next claim sweeps
    ],
)
def test_a_claim_sweeps_expired_leases_at_most_once_per_period(
    looks: list[float], expected: list[bool]
) -> None:
    """Claims at these times (seconds) read the lane of expired leases when it is due."""
    sweep = LeaseSweep(every_seconds=1.0)
    assert [sweep.due(t) for t in looks] == expected


#: Look for rows (after a move, or while a writer seen may be open), or rest.
L, R = True, False
#: The first looks of every case: a look for rows with a horizon, raised once, passed, rest.
SETTLE = [(5, 10, 11, L), (5, 11, 12, L), (5, 12, 13, L), (5, 12, 13, R)]


@pytest.mark.parametrize(
    "looks",
    [
        pytest.param(SETTLE, id="idle: one look for rows at start, then rest"),
        pytest.param(
            [
                *SETTLE,
                (6, 12, 20, L),
                (6, 15, 21, L),
                (6, 15, 22, L),
                (6, 21, 23, L),
                (6, 21, 23, R),
            ],
            id="a writer: look at once and while it may be open; rest once xmin passed the horizon",
        ),
        pytest.param(
            [
                *SETTLE,
                (6, 12, 20, L),
                (6, 12, 21, L),
                (6, 20, 22, L),
                (6, 20, 22, L),
                (6, 21, 23, L),
                (6, 21, 23, R),
            ],
            id="the horizon is raised at the look after the move",
        ),
        pytest.param(
            [
                *SETTLE,
                (6, 12, 20, L),
                (7, 12, 21, L),
                (8, 12, 22, L),
                (8, 12, 23, L),
                (8, 23, 24, L),
                (8, 23, 24, R),
            ],
            id="writers keep coming: a look for rows at every look that saw the sequence move",
        ),
        pytest.param(
            [
                *SETTLE,
                (6, 12, 20, L),
                (6, 12, 21, L),
                *[(6, 12, 0, L)] * 5,
                (6, 25, 0, L),
                (6, 25, 0, R),
            ],
            id="a long transaction holds xmin: the looks for rows go on while it lasts",
        ),
        pytest.param(
            [*SETTLE, (2, 12, 20, L)], id="a sequence set back by an operator is a move too"
        ),
        pytest.param(
            [
                (None, 10, 11, L),
                (None, 11, 12, L),
                (None, 12, 13, L),
                (None, 12, 13, R),
                (1, 12, 14, L),
            ],
            id="a sequence never used yet, then its first id",
        ),
    ],
)
def test_the_wake_up_rule_looks_for_rows_until_the_writers_seen_have_ended(
    looks: list[tuple[int | None, int, int, bool]],
) -> None:
    """Each look (``last_value``, ``xmin``, the transaction id the watcher would take next,
    whether to look for rows): the rule's answers, holding a horizon whenever it asks."""
    rule = SequenceWatch()
    decisions = []
    for value, xmin, xid, _ in looks:
        decisions.append(rule.observe(value, xmin))
        if rule.wants_horizon:
            rule.hold(xid)
    assert decisions == [expected for *_, expected in looks]


def test_the_wake_up_rule_starts_afresh_after_a_reset() -> None:
    """After a reconnect nothing seen before counts: the first look is a look for rows (rows
    committed meanwhile) with a new horizon, whatever the sequence did meanwhile."""
    rule = SequenceWatch()
    for value, xmin, xid, _ in SETTLE:
        rule.observe(value, xmin)
        if rule.wants_horizon:
            rule.hold(xid)
    rule.reset()
    assert rule.horizon is None
    assert rule.observe(5, 13) is True
    assert rule.wants_horizon
