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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any

from relay import publishers, timing
from relay.config import Settings
from relay.exceptions import BrokerUnavailable, StoreError
from relay.lease import LeaseKeeper
from relay.policy import CircuitBreaker, RetryPolicy
from relay.publishers import Publisher
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


@dataclass(slots=True)
class _Held:
    """A leased batch and the keeper renewing its lease."""

    events: list[ClaimedEvent]
    keeper: LeaseKeeper
    #: The dispatcher's clock when the batch was claimed.
    claimed_at: float


@dataclass(slots=True)
class _Outcome:
    """What the broker said about a batch, sorted into what the store will record."""

    held: _Held
    report: Report
    sent: list[ClaimedEvent] = field(default_factory=list)
    rescheduled: list[Rescheduled] = field(default_factory=list)
    buried: list[Buried] = field(default_factory=list)
    unavailable: list[ClaimedEvent] = field(default_factory=list)
    error: str | None = None
    delay: float = 0.0


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
    _executor: ThreadPoolExecutor | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        s = self.settings
        self.retry = RetryPolicy(s.max_attempts, s.backoff_base_seconds, s.backoff_max_seconds)
        self.breaker = CircuitBreaker(
            s.backoff_base_seconds, min(s.backoff_max_seconds, timing.BREAKER_MAX_SECONDS)
        )

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        store: Store | None = None,
        publisher: Publisher | None = None,
        **kwargs: Any,
    ) -> Dispatcher:
        """The dispatcher ``settings`` describe: a store on ``RELAY_DATABASE_URL`` and the
        publisher :func:`relay.publishers.for_url` picks for ``RELAY_EVENTS_URL``; either may
        be passed in instead. ``kwargs`` go to the constructor (``worker_id``, ``rng``, ...)."""
        s = settings
        if store is None:
            store = Store.from_url(s.database_url)
        if publisher is None:
            publisher = publishers.for_url(
                s.events_connection_url, s.exchange, confirm_timeout=s.confirm_timeout_seconds
            )
        return cls(store, publisher, s, **kwargs)

    def run_once(self) -> Report:
        """Claim one batch, publish it, record the outcomes."""
        held = self._claim(self.settings.batch_size)
        if held is None:
            return Report(cycles=1)
        outcome = self._publish(held)
        self._record(outcome, next_limit=0)
        return outcome.report

    def drain(
        self, budget_seconds: float | None = None, stop: threading.Event | None = None
    ) -> Report:
        """Run cycles while batches come back full, the time budget allows and ``stop`` is
        unset (a warm shutdown sets it: the batches in hand are published and recorded).

        Pipelined: while batch N is published (broker I/O, this thread), a database thread
        records batch N-1's outcomes and leases batch N+1 in one short transaction. No
        transaction is ever open across broker I/O; at most two batches are leased at once.
        """
        size = self.settings.batch_size
        budget = self.settings.drain_budget_seconds if budget_seconds is None else budget_seconds
        deadline = self.clock() + budget
        total = Report()
        held = self._claim(size)
        if held is None:
            total.add(Report(cycles=1))
            return total
        previous: _Outcome | None = None
        try:
            while held is not None:
                held = self._still_held(held, total)
                if held is None:
                    break
                more = (
                    len(held.events) >= size
                    and self.clock() < deadline
                    and not (stop is not None and stop.is_set())
                )
                job = None
                if previous is not None or more:
                    job = self._db_thread().submit(self._record, previous, size if more else 0)
                outcome = self._publish(held)
                held = job.result() if job is not None else None
                if previous is not None:
                    total.add(previous.report)
                previous = outcome
                if outcome.unavailable and held is not None:
                    # The broker is down: hand the batch claimed ahead back unpublished.
                    handed_back = self._unpublished(held, outcome.error)
                    held = None
                    self._record(handed_back, next_limit=0)
                    total.add(handed_back.report)
            if previous is not None:
                self._record(previous, next_limit=0)
                total.add(previous.report)
                previous = None
        finally:
            for leftover in (previous, held):
                if leftover is not None:
                    (leftover if isinstance(leftover, _Held) else leftover.held).keeper.stop()
        return total

    def close(self) -> None:
        """Stop the database thread (idempotent)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def _db_thread(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="relay-db")
        return self._executor

    def _claim(self, limit: int) -> _Held | None:
        if not self.breaker.allows(self.clock()):
            return None
        events = self.store.claim(self.worker_id, limit, self.settings.lease_seconds)
        return self._hold(events)

    def _hold(self, events: list[ClaimedEvent]) -> _Held | None:
        if not events:
            return None
        keeper = LeaseKeeper(self.store, self.worker_id, events, self.settings.lease_seconds)
        return _Held(events, keeper.start(), self.clock())

    def _still_held(self, held: _Held, report: Report) -> _Held | None:
        """A batch that waited half a lease or more (its worker was paused, say) may have been
        reclaimed meanwhile: keep only the rows this worker still holds, so it never publishes
        a row another worker owns. Costs nothing for a batch that did not wait."""
        if (
            self.clock() - held.claimed_at
            < self.settings.lease_seconds * timing.RECHECK_SHARE_OF_LEASE
        ):
            return held
        s = self.settings
        if self.store.renew(self.worker_id, held.events, s.lease_seconds) == len(held.events):
            return held
        kept = self.store.still_held(self.worker_id, held.events)
        report.lost += len(held.events) - len(kept)
        log.warning(
            "lease lost on %d of %d rows before publishing: another worker reclaimed them",
            len(held.events) - len(kept),
            len(held.events),
        )
        if not kept:
            held.keeper.stop()
            return None
        return _Held(kept, held.keeper, self.clock())

    def _publish(self, held: _Held) -> _Outcome:
        """Publish a leased batch and sort the broker's verdicts into outcomes (no DB I/O)."""
        events = held.events
        report = Report(
            cycles=1, claimed=len(events), last_batch_full=len(events) >= self.settings.batch_size
        )
        result = self.publisher.publish(events)
        outcome = _Outcome(held, report, sent=result.confirmed, unavailable=result.unavailable)
        for event, error in result.rejected:
            decision = self.retry.after_failure(event, error, self.rng)
            if isinstance(decision, Buried):
                outcome.buried.append(decision)
            else:
                outcome.rescheduled.append(decision)
        if result.unavailable:
            outcome.error = str(result.error or BrokerUnavailable())
            outcome.delay = self.breaker.record_failure(self.clock())
            report.broker_error = outcome.error
            log.warning("broker unavailable, backing off %.1fs: %s", outcome.delay, outcome.error)
        else:
            self.breaker.record_success()
        return outcome

    def _unpublished(self, held: _Held, error: str | None) -> _Outcome:
        delay = self.breaker.remaining(self.clock())
        report = Report(claimed=len(held.events))
        return _Outcome(held, report, unavailable=list(held.events), error=error, delay=delay)

    def _record(self, outcome: _Outcome | None, next_limit: int) -> _Held | None:
        """Record ``outcome`` (if any) and lease up to ``next_limit`` more rows, in one
        transaction; retried within half a lease, since the broker already has the messages."""
        deadline = self.clock() + self.settings.lease_seconds * timing.RECORD_RETRY_SHARE_OF_LEASE
        delay = timing.RECORD_RETRY_FIRST_SECONDS
        sent = outcome.sent if outcome else []
        rescheduled = outcome.rescheduled if outcome else []
        buried = outcome.buried if outcome else []
        try:
            while True:
                try:
                    if next_limit:
                        done, events = self.store.complete_and_claim(
                            self.worker_id,
                            sent=sent,
                            rescheduled=rescheduled,
                            buried=buried,
                            limit=next_limit,
                            lease_seconds=self.settings.lease_seconds,
                        )
                    else:
                        done = self.store.complete(
                            self.worker_id, sent=sent, rescheduled=rescheduled, buried=buried
                        )
                        events = []
                    break
                except StoreError as exc:
                    if not exc.retryable or self.clock() + delay > deadline:
                        raise
                    log.warning("recording outcomes failed, retrying in %.2fs: %s", delay, exc)
                    time.sleep(delay)
                    delay = min(delay * 2, timing.RECORD_RETRY_MAX_SECONDS)
            if outcome is not None:
                self._account(outcome, done)
        finally:
            if outcome is not None:
                outcome.held.keeper.stop()
        return self._hold(events)

    def _account(self, outcome: _Outcome, done: Completed) -> None:
        report = outcome.report
        report.sent, report.rescheduled, report.buried = done.sent, done.rescheduled, done.buried
        report.lost = done.lost
        if outcome.unavailable:
            report.released = self.store.release(
                self.worker_id, outcome.unavailable, outcome.delay, outcome.error or ""
            )
            report.lost += len(outcome.unavailable) - report.released
        if report.lost:
            log.warning("lease lost on %d rows: another worker reclaimed them", report.lost)

    def loop(self, stop: threading.Event, *, idle_seconds: float | None = None) -> Report:
        """Drain until ``stop`` is set, resting ``idle_seconds`` when the outbox is empty."""
        idle = self.settings.tick_seconds if idle_seconds is None else idle_seconds
        total = Report()
        db_backoff = timing.DATABASE_RETRY_FIRST_SECONDS
        while not stop.is_set():
            try:
                report = self.drain(stop=stop)
            except StoreError as exc:
                if not exc.retryable:
                    raise
                log.warning("database unavailable, retrying in %.1fs: %s", db_backoff, exc)
                stop.wait(db_backoff)
                db_backoff = min(db_backoff * 2, timing.DATABASE_RETRY_MAX_SECONDS)
                continue
            db_backoff = timing.DATABASE_RETRY_FIRST_SECONDS
            total.add(report)
            if report.broker_error:
                stop.wait(max(self.breaker.remaining(self.clock()), timing.BROKER_REST_MIN_SECONDS))
            elif not report.last_batch_full:
                stop.wait(idle)
        return total
