"""Pure decisions: backoff (of a row's attempts, and of the process-level retry loops), the next
state after an attempt, the broker circuit breaker, the size of the next claim, when a claim
also looks for expired leases, the share of a tick's fan-out each database of a fleet gets.

Time and randomness are passed in; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from relay.records import Buried, ClaimedEvent, Rescheduled


def backoff_seconds(attempt: int, *, base: float, cap: float, rng: random.Random) -> float:
    """Full-jitter exponential backoff for the retry after failed ``attempt`` (1-based).

    Uniform in ``[0, min(cap, base * 2**(attempt-1))]``; the exponent is clamped so a large
    attempt number cannot overflow.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    exponent = min(attempt - 1, 1023)
    try:
        ceiling = min(cap, base * math.ldexp(1.0, exponent))
    except OverflowError:
        ceiling = cap
    return rng.uniform(0.0, ceiling)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How failed attempts are retried: built from Settings, used by the dispatcher."""

    max_attempts: int
    base_seconds: float
    cap_seconds: float

    def after_failure(
        self, event: ClaimedEvent, error: str, rng: random.Random
    ) -> Rescheduled | Buried:
        """The outcome of a failed attempt: reschedule with backoff, or bury on the last."""
        if event.attempt >= self.max_attempts:
            return Buried(event, error)
        delay = backoff_seconds(
            event.attempt, base=self.base_seconds, cap=self.cap_seconds, rng=rng
        )
        return Rescheduled(event, delay, error)


@dataclass(slots=True)
class CircuitBreaker:
    """Backs the whole relay off while the broker is unreachable.

    A connection-level failure is not the events' fault: their attempts are given back and
    nothing is claimed until the breaker's delay has passed. The delay doubles with each
    consecutive failure, capped; one success closes the breaker. ``now`` is a monotonic reading
    the caller passes in.
    """

    base_seconds: float
    cap_seconds: float
    failures: int = 0
    open_until: float = 0.0

    def allows(self, now: float) -> bool:
        """Whether a claim may be attempted now."""
        return now >= self.open_until

    def record_failure(self, now: float) -> float:
        """Open (or keep open) the breaker; returns how long it stays open."""
        self.failures += 1
        exponent = min(self.failures - 1, 60)
        delay = min(self.cap_seconds, self.base_seconds * (2.0**exponent))
        self.open_until = now + delay
        return delay

    def record_success(self) -> None:
        """Close the breaker."""
        self.failures = 0
        self.open_until = 0.0

    def remaining(self, now: float) -> float:
        """Seconds until a claim may be attempted again (0 when closed)."""
        return max(0.0, self.open_until - now)


@dataclass(slots=True)
class Backoff:
    """The waits of a process-level retry loop (recording outcomes, ``dispatch --loop`` while
    the database is down, the wake-up's reconnect): ``first``, then doubling, capped at
    ``most``; :meth:`reset` after a success. No jitter: each loop is one per process, so
    there is no herd to spread. The caller waits (sleep, or an event it can be woken from)."""

    first: float
    most: float
    _next: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self._next = self.first

    def next(self) -> float:
        """The wait before the next try; the one after it doubles, up to ``most``."""
        wait = self._next
        self._next = min(self.most, wait * 2)
        return wait

    def reset(self) -> None:
        """A try succeeded: the next failure waits ``first`` again."""
        self._next = self.first


@dataclass(slots=True)
class BatchSizer:
    """How many rows a drain's next claim asks for: from ``first``, doubling while claims come
    back full (a backlog: fewer, larger statements and commits per event), up to ``most``; a
    short claim starts again from ``first``, so a trickle is claimed in small batches."""

    first: int
    most: int
    #: The next claim's size.
    size: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.size = self.first

    def claimed(self, asked: int, got: int) -> None:
        """A claim that asked for ``asked`` rows returned ``got``."""
        self.size = min(self.most, asked * 2) if got >= asked else self.first


@dataclass(slots=True)
class LeaseSweep:
    """When a claim also reads the lane of expired leases: at most every ``every_seconds``
    (the first claim always does).

    The lane reads ``ix_outbox_leases`` from its oldest expiry up to now, and on PostgreSQL
    that range holds an entry for the old version of every row claimed since the table's last
    vacuum (a claimed row's lease ends in the past once it is sent; the entry goes only when
    vacuum removes it). Read by every claim, it cost each claim time in proportion to the rows
    relayed since the last vacuum (9 ms a claim after a minute at 3,000 events a second); read
    once a second, it costs that once a second, and an expired lease (a crashed worker's) is
    taken back at most about a second later than at once, against a lease of 30 s.
    """

    every_seconds: float
    _last: float | None = field(default=None, init=False)

    def due(self, now: float) -> bool:
        """Whether the claim made at ``now`` (a monotonic clock) reads the lane; it counts as
        the look when it does."""
        if self._last is not None and now - self._last < self.every_seconds:
            return False
        self._last = now
        return True


def task_expired(expires: str | None, now: datetime) -> bool:
    """Whether a Celery task whose ``expires`` header (ISO 8601) is ``expires`` has expired at
    ``now`` (aware). Celery compares ``expires`` with wall clocks, so the relay does too."""
    if not expires:
        return False
    deadline = datetime.fromisoformat(expires)
    if deadline.tzinfo is None:
        deadline = deadline.replace(tzinfo=UTC)
    return now >= deadline


class IdlePoll:
    """The adaptive poll's waits: ``floor`` after activity, doubling to ``ceiling`` while the
    outbox stays empty. Idle, a process claims ``1 / ceiling`` times a second; after a burst,
    about ``log2(ceiling / floor)`` more claims until it is back at the ceiling.

    ``hold`` keeps the floor for that many more looks after activity before doubling: a watcher
    whose empty looks may only mean that someone else drained the rows (beat's poller, while
    workers drain) stays quick while rows keep coming, at ``hold`` extra looks per burst."""

    def __init__(self, floor: float, ceiling: float, hold: int = 0) -> None:
        self.floor, self.ceiling, self.hold = floor, ceiling, hold
        self._next = ceiling
        self._held = hold

    def reset(self) -> None:
        self._next, self._held = self.floor, 0

    def next(self) -> float:
        wait = self._next
        if self._held < self.hold:
            self._held += 1
        else:
            self._next = min(self.ceiling, wait * 2)
        return wait


def share_fanout(
    backlogs: Mapping[str, int], batch_size: int, max_fanout: int, *, turn: int = 0
) -> tuple[str, ...]:
    """The ``claim_and_dispatch`` tasks one tick of a fleet over several databases sends, in
    the order to send them: one name per task, ``max_fanout`` at most in all.

    Each database wants one task per ``batch_size`` rows of its (bounded) ``backlogs`` count.
    Tasks are dealt in rounds, one per database still wanting more in each round (max-min
    fairness): every database with work gets its first task before any gets a second, so a
    million-row backlog takes only what the others leave. When more databases have work than
    ``max_fanout`` allows, ``turn`` (the tick's number) rotates which ones go first, so each is
    served within a few ticks. Sending in rounds interleaves the queue the same way.
    """
    if batch_size < 1 or max_fanout < 1:
        raise ValueError(f"batch_size and max_fanout must be >= 1, got {batch_size}, {max_fanout}")
    wanted = {name: math.ceil(rows / batch_size) for name, rows in backlogs.items() if rows > 0}
    order = list(wanted)
    if order:
        start = (turn * max_fanout) % len(order)
        order = order[start:] + order[:start]
    sends: list[str] = []
    round_ = 1
    while len(sends) < max_fanout:
        dealt = [name for name in order if wanted[name] >= round_]
        if not dealt:
            break
        sends.extend(dealt[: max_fanout - len(sends)])
        round_ += 1
    return tuple(sends)


@dataclass(frozen=True, slots=True)
class PurgePacing:
    """How the retention purge paces itself: each transaction deletes a batch sized so that it
    lasts about ``target_seconds`` (short: a claim or a producer waiting on one of its row or
    index locks waits at most that long), and the purger rests between batches so that it
    works ``duty`` of its time, leaving the rest of the database to the relay and producers.

    A purger deletes ``duty`` times the rate at which its batches run: at least
    ``max_batch / target_seconds * duty`` rows a second (50,000 at the defaults) whenever a
    batch of ``max_batch`` rows takes under ``target_seconds``, more when batches are quicker
    (80,000 measured on PostgreSQL, docs/benchmarks.md), several times the relay's own rate on
    2 cores: it catches up with a backlog instead of carrying it from one run to the next.
    Batches never shrink below ``min_batch``: on a loaded machine a batch is slow whatever its
    size, and smaller ones would only slow the purge down (deleting sent rows takes no lock a
    claim or a producer waits for on PostgreSQL; on MariaDB their gap locks cover only the
    oldest sent rows).

    **Delivery first.** A purge shares the database's CPU and disk with the relays it purges
    for. After each batch the purger reads how late delivery is (the age of the oldest due
    pending row) and hands the result to :meth:`next_duty`: above ``yield_lag_seconds`` its duty
    halves, down to ``min_duty``; at or below, it doubles back up to ``duty``. On MariaDB, where
    each deleted row leaves every index (no partial indexes), a 10,000,000-row catch-up at half
    duty beside 3,000 events a second put delivery 108 s behind within 9 minutes on 2 cores
    (docs/benchmarks.md, section 16); yielding keeps delivery within about the threshold while
    the purge goes on at ``min_duty`` or more, so a backlog is still purged in bounded time."""

    target_seconds: float = 0.1
    duty: float = 0.5
    first_batch: int = 1000
    min_batch: int = 1000
    max_batch: int = 10_000
    #: Delivery this late (seconds) makes the purge yield.
    yield_lag_seconds: float = 0.5
    #: The least share of its time the purge works, however late delivery is.
    min_duty: float = 0.05

    def next_batch(self, size: int, elapsed: float) -> int:
        """The next batch's size after one of ``size`` rows took ``elapsed`` seconds: scaled
        toward the target, by at most a factor of two either way, within the bounds."""
        ratio = 2.0 if elapsed <= 0 else max(0.5, min(2.0, self.target_seconds / elapsed))
        return max(self.min_batch, min(self.max_batch, int(size * ratio)))

    def next_duty(self, duty: float, lag: float | None) -> float:
        """The duty after a batch, from the previous one and delivery's ``lag`` (seconds; None:
        nothing pending): halved while delivery is later than ``yield_lag_seconds``, else
        doubled, within ``min_duty`` and ``duty``."""
        if lag is not None and lag > self.yield_lag_seconds:
            return max(self.min_duty, duty / 2)
        return min(self.duty, duty * 2)

    def pause(self, elapsed: float, duty: float | None = None) -> float:
        """Seconds to rest after a batch that took ``elapsed``, to keep to the duty cycle
        (``duty``, or the policy's own)."""
        share = self.duty if duty is None else duty
        return max(0.0, elapsed) * (1.0 - share) / share


@dataclass(slots=True)
class SequenceWatch:
    """The PostgreSQL wake-up's rule (``relay.dispatch.watcher``): a writer pays nothing for it,
    the relay looks at the outbox's id sequence and at the server's oldest running transaction,
    and looks for claimable rows only when a writer may have committed some.

    Every ``INSERT`` that takes an id moves the sequence (``last_value``) before its transaction
    commits. Each look reads ``last_value`` and ``xmin``, the oldest transaction still running:

    - the value moved: look for rows now, and hold a horizon: a transaction id taken just after
      the look (:attr:`wants_horizon`, then :meth:`hold`), so every writer seen moving the
      sequence has an older one; raised once more at the next look, for a writer that took its
      id just before its transaction id;
    - behind the horizon (``xmin < horizon``: a writer seen may still be open): look for rows
      at every look, since its commit moves nothing;
    - ``xmin`` passed the horizon: every writer seen has ended; look once more, then rest.

    (A snapshot's ``xmax`` cannot be the horizon: it is one past the newest transaction that
    *ended*, so a writer still running with a newer id is in no snapshot's list.)
    A transaction that holds ``xmin`` back for long (a report, a session idle in transaction)
    keeps the looks for rows going while it lasts. The first look (and the first after a
    reconnect) is a look for rows, with a horizon for the writers already running.
    """

    #: ``last_value`` at the previous look (None: the sequence was never used).
    value: int | None = None
    #: Transactions below this id may be writers the relay has not seen end.
    horizon: int | None = None
    #: Set by a look after which the watcher takes a new transaction id for :meth:`hold`.
    wants_horizon: bool = False
    _seen: bool = False
    _raise: bool = False

    def reset(self) -> None:
        """Forget what was seen (a new connection): the next look starts afresh."""
        self.value, self.horizon, self.wants_horizon = None, None, False
        self._seen = self._raise = False

    def observe(self, value: int | None, xmin: int) -> bool:
        """One look: the sequence's ``last_value`` (None: never used) and the snapshot's
        ``xmin``. True: look for claimable rows now (and wake the relay if there are)."""
        if not self._seen or value != self.value:
            self._seen, self.value = True, value
            self.wants_horizon = self._raise = True
            return True
        if self._raise:
            self._raise, self.wants_horizon = False, True
            return True
        self.wants_horizon = False
        if self.horizon is None:
            return False
        if xmin >= self.horizon:
            self.horizon = None
        return True

    def hold(self, xid: int) -> None:
        """The transaction id taken after a look that :attr:`wants_horizon`."""
        self.horizon = xid if self.horizon is None else max(self.horizon, xid)
        self.wants_horizon = False


def exhausted(attempt: int, max_attempts: int) -> str | None:
    """Why a row claimed for the ``attempt``-th time is not published (None: it may be).

    An attempt is counted at claim, so a row claimed past ``max_attempts`` is one whose every
    lease expired without an outcome: the relay holding it crashed, hung or was killed each time
    (``RELAY_MAX_ATTEMPTS`` ends that loop, as it ends a loop of refusals)."""
    if attempt <= max_attempts:
        return None
    return (
        f"attempts exhausted: claimed {attempt} times, {attempt - max_attempts} past "
        f"RELAY_MAX_ATTEMPTS={max_attempts}, without an outcome recorded (each lease expired: "
        "the relay holding the row crashed, hung or was killed)"
    )
