"""One dispatch cycle, claim -> publish -> record, and the drain and loop built on it.

Framework-free: Celery's task and ``relay dispatch`` both drive this. Never holds a transaction
or a row lock across broker I/O: the claim commits before the first publish, the outcomes are
written after the last confirm, and a lease keeper renews the lease meanwhile.
"""

from __future__ import annotations

import logging
import os
import random
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields

from relay.config import Settings
from relay.exceptions import DatabaseUnavailable
from relay.policy import CircuitBreaker, RetryPolicy
from relay.publisher import Publisher
from relay.records import Buried, ClaimedEvent, Rescheduled
from relay.store import Completed, Store

log = logging.getLogger(__name__)


def make_worker_id() -> str:
    """``host:pid:nonce``: unique per dispatcher, readable in ``locked_by``."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass(slots=True)
class Report:
    """What one cycle, or a sum of cycles, did."""

    cycles: int = 0
    claimed: int = 0
    sent: int = 0
    rescheduled: int = 0
    buried: int = 0
    #: Given back without spending an attempt because the broker was unreachable.
    released: int = 0
    #: Outcomes refused by the fence: the lease had expired and another worker took the row.
    lost: int = 0
    #: Set when the broker was unreachable (the circuit breaker opened).
    broker_error: str | None = None
    last_batch_full: bool = False

    def add(self, other: Report) -> None:
        for f in fields(self):
            if f.name in ("broker_error", "last_batch_full"):
                continue
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        self.broker_error = other.broker_error or self.broker_error
        self.last_batch_full = other.last_batch_full


class LeaseKeeper:
    """Renews a batch's lease every third of the lease while the batch is being published."""

    def __init__(
        self, store: Store, worker: str, events: Sequence[ClaimedEvent], lease_seconds: float
    ) -> None:
        self._store, self._worker, self._events = store, worker, events
        self._lease = lease_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="relay-lease", daemon=True)
        self.renewals = 0

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._lease / 3):
            try:
                held = self._store.renew(self._worker, self._events, self._lease)
            except DatabaseUnavailable as exc:
                log.warning("lease renewal failed, will retry: %s", exc)
                continue
            self.renewals += 1
            if held < len(self._events):
                log.warning(
                    "lease lost on %d of %d rows while publishing",
                    len(self._events) - held,
                    len(self._events),
                )


@dataclass
class Dispatcher:
    """Moves events from the outbox to the broker for one worker."""

    store: Store
    publisher: Publisher
    settings: Settings
    worker_id: str = field(default_factory=make_worker_id)
    rng: random.Random = field(default_factory=random.Random)
    clock: Callable[[], float] = time.monotonic
    breaker: CircuitBreaker = field(init=False)
    retry: RetryPolicy = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.retry = RetryPolicy(s.max_attempts, s.backoff_base_seconds, s.backoff_max_seconds)
        self.breaker = CircuitBreaker(s.backoff_base_seconds, min(s.backoff_max_seconds, 60.0))

    def run_once(self) -> Report:
        """Claim one batch, publish it, record the outcomes."""
        events = self._claim()
        if not events:
            return Report(cycles=1)
        report, _ = self._dispatch(events, claim_next=False)
        return report

    def drain(
        self, budget_seconds: float | None = None, stop: threading.Event | None = None
    ) -> Report:
        """Run cycles while batches come back full, the time budget allows and ``stop`` is
        unset (a warm shutdown sets it: the batch in flight finishes and is recorded).

        While draining, each batch's outcomes are recorded in the same transaction that leases
        the next batch: one commit per batch.
        """
        budget = self.settings.drain_budget_seconds if budget_seconds is None else budget_seconds
        deadline = self.clock() + budget
        total = Report()
        events = self._claim()
        if not events:
            total.add(Report(cycles=1))
            return total
        while events:
            more = (
                len(events) >= self.settings.batch_size
                and self.clock() < deadline
                and not (stop is not None and stop.is_set())
            )
            report, events = self._dispatch(events, claim_next=more)
            total.add(report)
        return total

    def _claim(self) -> list[ClaimedEvent]:
        if not self.breaker.allows(self.clock()):
            return []
        s = self.settings
        return self.store.claim(self.worker_id, s.batch_size, s.lease_seconds)

    def _dispatch(
        self, events: list[ClaimedEvent], *, claim_next: bool
    ) -> tuple[Report, list[ClaimedEvent]]:
        """Publish a claimed batch and record its outcomes (and lease the next batch if
        ``claim_next`` and the broker was reachable)."""
        s = self.settings
        report = Report(cycles=1, claimed=len(events), last_batch_full=len(events) >= s.batch_size)
        with LeaseKeeper(self.store, self.worker_id, events, s.lease_seconds):
            result = self.publisher.publish(events)
        rescheduled: list[Rescheduled] = []
        buried: list[Buried] = []
        for event, error in result.rejected:
            outcome = self.retry.after_failure(event, error, self.rng)
            if isinstance(outcome, Buried):
                buried.append(outcome)
            else:
                rescheduled.append(outcome)
        next_limit = s.batch_size if claim_next and not result.unavailable else 0
        done, next_events = self._complete(result.confirmed, rescheduled, buried, next_limit)
        report.sent, report.rescheduled, report.buried, report.lost = (
            done.sent,
            done.rescheduled,
            done.buried,
            done.lost,
        )
        if result.unavailable:
            delay = self.breaker.record_failure(self.clock())
            report.broker_error = result.error
            report.released = self.store.release(
                self.worker_id, result.unavailable, delay, result.error or "broker unavailable"
            )
            report.lost += len(result.unavailable) - report.released
            log.warning("broker unavailable, backing off %.1fs: %s", delay, result.error)
        else:
            self.breaker.record_success()
        if report.lost:
            log.warning("lease lost on %d rows: another worker reclaimed them", report.lost)
        return report, next_events

    def _complete(
        self,
        sent: list[ClaimedEvent],
        rescheduled: list[Rescheduled],
        buried: list[Buried],
        next_limit: int,
    ) -> tuple[Completed, list[ClaimedEvent]]:
        # The broker already has these messages: retry the bookkeeping within the lease rather
        # than let the rows be reclaimed and published again.
        deadline = self.clock() + self.settings.lease_seconds * 0.5
        delay = 0.05
        while True:
            try:
                if next_limit:
                    return self.store.complete_and_claim(
                        self.worker_id,
                        sent=sent,
                        rescheduled=rescheduled,
                        buried=buried,
                        limit=next_limit,
                        lease_seconds=self.settings.lease_seconds,
                    )
                done = self.store.complete(
                    self.worker_id, sent=sent, rescheduled=rescheduled, buried=buried
                )
                return done, []
            except DatabaseUnavailable as exc:
                if self.clock() + delay > deadline:
                    raise
                log.warning("recording outcomes failed, retrying in %.2fs: %s", delay, exc)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def loop(self, stop: threading.Event, *, idle_seconds: float | None = None) -> Report:
        """Drain until ``stop`` is set, resting ``idle_seconds`` when the outbox is empty."""
        idle = self.settings.tick_seconds if idle_seconds is None else idle_seconds
        total = Report()
        db_backoff = 0.1
        while not stop.is_set():
            try:
                report = self.drain(stop=stop)
            except DatabaseUnavailable as exc:
                log.warning("database unavailable, retrying in %.1fs: %s", db_backoff, exc)
                stop.wait(db_backoff)
                db_backoff = min(db_backoff * 2, 5.0)
                continue
            db_backoff = 0.1
            total.add(report)
            if report.broker_error:
                stop.wait(max(self.breaker.remaining(self.clock()), 0.05))
            elif not report.last_batch_full:
                stop.wait(idle)
        return total
