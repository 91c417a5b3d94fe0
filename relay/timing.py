"""The timing fractions and bounds the relay runs by, named in one place, and the adaptive
poll's waits; pure.

Most are shares of the lease (``RELAY_LEASE_SECONDS``): whatever a worker does with a batch
must end well inside the lease it holds on it, so these scale with it.
"""

from __future__ import annotations

#: One drain (``claim_and_dispatch``, a ``dispatch`` cycle) claims again only within this share.
DRAIN_SHARE_OF_LEASE = 0.5
#: A batch that waited this share before publishing (its worker was paused) is re-checked first.
RECHECK_SHARE_OF_LEASE = 0.5
#: Recording a published batch's outcomes is retried for this share (the broker has them).
RECORD_RETRY_SHARE_OF_LEASE = 0.5
#: The lease keeper renews this often.
RENEW_SHARE_OF_LEASE = 1 / 3
#: A relay Celery task's soft time limit: past this a drain hangs (its budget is half a lease).
SOFT_LIMIT_SHARE_OF_LEASE = 0.9

#: The circuit breaker never waits longer than this between probes of a broker that is down.
BREAKER_MAX_SECONDS = 60.0
#: The shortest rest of ``dispatch --loop`` after a broker failure.
BROKER_REST_MIN_SECONDS = 0.05
#: First and longest wait between retries of recording outcomes (doubling in between).
RECORD_RETRY_FIRST_SECONDS, RECORD_RETRY_MAX_SECONDS = 0.05, 2.0
#: First and longest wait of ``dispatch --loop`` while the database is unreachable.
DATABASE_RETRY_FIRST_SECONDS, DATABASE_RETRY_MAX_SECONDS = 0.1, 5.0
#: The LISTEN connection checks it is still alive after this long without a notification.
LISTEN_HEARTBEAT_SECONDS = 5.0
#: First and longest wait before the listener reconnects (doubling in between).
LISTEN_RETRY_FIRST_SECONDS, LISTEN_RETRY_MAX_SECONDS = 0.1, 5.0


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
