"""Pure backoff: the full-jitter backoff of a row's retries and the waits of the process-level
retry loops. Randomness is passed in; nothing here reads a clock or does I/O.

The other pure decisions live beside their users: :mod:`relay.dispatch.decisions` (a failed
attempt's outcome, the circuit breaker), :mod:`relay.dispatch.batching`,
:mod:`relay.wakeup.polling`, :mod:`relay.retention.pacing`,
:mod:`relay.store.dispatch_path.lease_sweep`, and
``share_fanout`` in :mod:`relay.celery.many_databases`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field


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
