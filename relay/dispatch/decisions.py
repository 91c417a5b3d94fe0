"""Pure decisions of one dispatch cycle: what a failed attempt leads to (a retry with backoff,
or burial), the broker circuit breaker, a row claimed past its attempts, a row past its
deadline. Time and randomness are passed in; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from relay.policy import backoff_seconds
from relay.records import TASK_HEADER, Buried, ClaimedEvent, Rescheduled


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


def task_expired(expires: str | None, now: datetime) -> bool:
    """Whether a Celery task whose ``expires`` header (ISO 8601) is ``expires`` has expired at
    ``now`` (aware). Celery compares ``expires`` with wall clocks, so the relay does too."""
    if not expires:
        return False
    deadline = datetime.fromisoformat(expires)
    if deadline.tzinfo is None:
        deadline = deadline.replace(tzinfo=UTC)
    return now >= deadline


#: How the reason of a row dead-lettered past its deadline begins (``relay failed list
#: --error "expired at"`` finds them).
EXPIRED = "expired at"


def expired_reason(deadline: Any) -> str:
    """Why a row claimed past its deadline ``deadline`` (its ``expires_at`` as the claim read
    it, or a Celery task's ``expires``) is dead-lettered unpublished: "expired at
    2026-12-07T05:00:00Z, before it was published"."""
    if isinstance(deadline, datetime):
        aware = deadline if deadline.tzinfo is not None else deadline.replace(tzinfo=UTC)
        when = aware.astimezone(UTC).isoformat().replace("+00:00", "Z")
    else:
        when = f"{deadline!r} (as stored, no time Python holds)"
    return f"{EXPIRED} {when}, before it was published"


def refusals(
    events: Sequence[ClaimedEvent], max_attempts: int, now: datetime
) -> tuple[list[Buried], list[ClaimedEvent]]:
    """The rows of a claimed batch to dead-letter without publishing them, and, of those, the
    expired ones: a row no message can carry (``ClaimedEvent.defect``), one claimed past
    ``max_attempts`` (its leases kept expiring), and one past its deadline (``expires_at``
    by the database's clock at claim, or, for a Celery task row written before rows had a
    deadline, its ``expires`` header at ``now``, as Celery reads it: a worker would only
    discard it)."""
    refused, expired = [], []
    for event in events:
        why = event.defect or exhausted(event.attempt, max_attempts)
        late = False
        if why is None and event.expired:
            why, late = expired_reason(event.expires_at), True
        elif why is None and event.headers is not None and TASK_HEADER in event.headers:
            deadline = event.headers[TASK_HEADER]["headers"].get("expires")
            if task_expired(deadline, now):
                why, late = expired_reason(datetime.fromisoformat(deadline)), True
        if why is not None:
            refused.append(Buried(event, why))
            if late:
                expired.append(event)
    return refused, expired
