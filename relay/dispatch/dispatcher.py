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
from datetime import UTC, datetime
from typing import Any

from relay import publishers, timing
from relay.config import Settings
from relay.dispatch.lease import LeaseKeeper
from relay.exceptions import BrokerUnavailable, StoreError
from relay.observe.observers import Observer, Recorded
from relay.policy import BatchSizer, CircuitBreaker, RetryPolicy, task_expired
from relay.publishers import Publisher, message
from relay.records import Buried, ClaimedEvent, PublishResult, Released, Rescheduled
from relay.store.dispatch import Completed, Store

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
    #: Given back without spending an attempt: the broker was unreachable, or an earlier row
    #: of the same key failed in the batch.
    released: int = 0
    #: Outcomes refused by the fence: the lease had expired and another worker took the row.
    lost: int = 0
    #: Set when the broker was unreachable (the circuit breaker opened).
    broker_error: str | None = None
    #: The last claim found nothing: the outbox had nothing claimable for this worker.
    drained: bool = False

    def add(self, other: Report) -> None:
        for f in fields(self):
            if f.name in ("broker_error", "drained"):
                continue
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        self.broker_error = other.broker_error or self.broker_error
        self.drained = other.drained


@dataclass(slots=True)
class Batch:
    """A leased batch and the keeper renewing its lease, which it stops on exit (or close)."""

    events: list[ClaimedEvent]
    keeper: LeaseKeeper
    #: The dispatcher's clock just before the statement that leased (or last renewed) the
    #: batch: the lease cannot have started earlier, so the batch's age is never under-counted,
    #: even when the worker was paused between that commit and this object being built.
    claimed_at: float

    def close(self) -> None:
        self.keeper.stop()

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Why a Celery task row ended failed without being published.
EXPIRED = "expired: the task's expires passed before it could be published"
#: Why the rows behind a key's failed row are given back.
BEHIND_A_FAILURE = "an earlier row of its ordering key failed in the same batch"


@dataclass(slots=True)
class _Outcome:
    """What the broker said about a batch, sorted into what the store will record."""

    batch: Batch
    report: Report
    sent: list[ClaimedEvent] = field(default_factory=list)
    rescheduled: list[Rescheduled] = field(default_factory=list)
    buried: list[Buried] = field(default_factory=list)
    #: The broker was unreachable: given back after ``delay``.
    unavailable: list[ClaimedEvent] = field(default_factory=list)
    #: Behind a failed row of their key: given back at once, without spending an attempt.
    behind: list[ClaimedEvent] = field(default_factory=list)
    error: str | None = None
    delay: float = 0.0

    def released(self) -> list[Released]:
        groups = []
        if self.unavailable:
            groups.append(Released(self.unavailable, self.delay, self.error or ""))
        if self.behind:
            groups.append(Released(self.behind, 0.0, BEHIND_A_FAILURE))
        return groups


def hold_back_after_failures(result: PublishResult) -> list[ClaimedEvent]:
    """Take out of ``result`` every row of an ordering key that comes after the key's first
    row that did not go through (rejected, withheld or unavailable), and return them: a key's
    rows are marked sent only up to its first failure, so nothing overtakes the failed row.

    With confirms awaited per batch, rows after a nacked or returned one may have reached the
    broker already; they are given back and published again after it (duplicates, in order).
    """
    failed = {e.id for e, _ in result.rejected} | {e.id for e in result.withheld}
    failed |= {e.id for e in result.unavailable}
    first_failure: dict[str | None, int] = {}
    everything = [*result.confirmed, *(e for e, _ in result.rejected), *result.withheld]
    for event in [*everything, *result.unavailable]:
        if event.seq is not None and event.id in failed:
            seen = first_failure.get(event.ordering_key)
            if seen is None or event.seq < seen:
                first_failure[event.ordering_key] = event.seq

    def behind(event: ClaimedEvent) -> bool:
        first = first_failure.get(event.ordering_key)
        return event.seq is not None and first is not None and event.seq > first

    held_back = [e for e in everything if behind(e)]
    result.confirmed = [e for e in result.confirmed if not behind(e)]
    result.rejected = [(e, err) for e, err in result.rejected if not behind(e)]
    result.withheld = []
    return held_back


@dataclass
class Dispatcher:
    """Moves events from the outbox to the broker for one worker."""

    store: Store
    publisher: Publisher
    settings: Settings
    worker_id: str = field(default_factory=make_worker_id)
    rng: random.Random = field(default_factory=random.Random)
    clock: Callable[[], float] = time.monotonic
    #: Told of each claim, publish and recorded outcome (metrics, tracing); no-op by default.
    observer: Observer = field(default_factory=Observer)
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
            store = Store.from_url(s.database_url, source=s.source)
        if publisher is None:
            publisher = publishers.for_url(
                s.events_connection_url, s.exchange, confirm_timeout=s.confirm_timeout_seconds
            )
        return cls(store, publisher, s, **kwargs)

    def run_once(self) -> Report:
        """Claim one batch, publish it, record the outcomes."""
        batch = self._claim(self.settings.batch_size)
        if batch is None:
            return Report(cycles=1, drained=True)
        with batch:
            outcome = self._publish(batch)
            self._record(outcome, next_limit=0)
        return outcome.report

    def drain(
        self, budget_seconds: float | None = None, stop: threading.Event | None = None
    ) -> Report:
        """Claim, publish and record batches until a claim finds nothing, the time budget is
        spent or ``stop`` is set (a warm shutdown: the batches in hand are published and
        recorded). ``Report.drained`` tells the first case from the others.

        Pipelined: while batch N is published (broker I/O, this thread), the database thread
        records batch N-1's outcomes and leases batch N+1 in one short transaction. No
        transaction is ever open across broker I/O; at most two batches are leased at once.
        Claims grow from ``RELAY_BATCH_SIZE`` to ``RELAY_BATCH_MAX`` while they come back full
        (:class:`relay.policy.BatchSizer`).
        """
        budget = self.settings.drain_budget_seconds if budget_seconds is None else budget_seconds
        deadline = self.clock() + budget
        sizer = BatchSizer(self.settings.batch_size, self.settings.batch_max)

        def going() -> bool:
            return self.clock() < deadline and not (stop is not None and stop.is_set())

        def sized(asked: int, claimed: Batch | None) -> Batch | None:
            if asked:
                sizer.claimed(asked, 0 if claimed is None else len(claimed.events))
            return claimed

        total = Report()
        batch = sized(sizer.size, self._claim(sizer.size))
        published: _Outcome | None = None  # published, its outcomes not yet recorded
        try:
            while batch is not None:
                batch = self._still_held(batch, total)
                if batch is None:
                    break
                asked = sizer.size if going() else 0
                ahead = self._db_thread().submit(self._record, published, asked)
                outcome = self._publish(batch)
                batch = sized(asked, ahead.result())
                self._settle(published, total)
                published = outcome
                if outcome.unavailable:
                    if batch is not None:  # the broker is down: give back the batch ahead
                        handed_back, batch = self._unpublished(batch, outcome.error), None
                        self._record(handed_back, next_limit=0)
                        self._settle(handed_back, total)
                    break
                if batch is None and going():
                    # The lease ahead found nothing, maybe only because the batch just
                    # published still holds its keys: record it, then look again.
                    asked = sizer.size
                    batch = sized(asked, self._record(published, next_limit=asked))
                    self._settle(published, total)
                    published = None
                    total.drained = batch is None
            if published is not None:
                self._record(published, next_limit=0)
                self._settle(published, total)
                published = None
        finally:
            for leftover in (published.batch if published else None, batch):
                if leftover is not None:
                    leftover.close()
        if total.cycles == 0:  # the first claim found nothing (or the breaker is open)
            total.cycles, total.drained = 1, True
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

    @staticmethod
    def _settle(outcome: _Outcome | None, total: Report) -> None:
        if outcome is not None:
            total.add(outcome.report)

    def _claim(self, limit: int) -> Batch | None:
        if not self.breaker.allows(self.clock()):
            return None
        started, since = time.perf_counter(), self.clock()
        events = self.store.claim(self.worker_id, limit, self.settings.lease_seconds)
        self.observer.claimed(events, time.perf_counter() - started)
        return self._hold(events, since)

    def _hold(self, events: list[ClaimedEvent], since: float) -> Batch | None:
        """Start renewing the lease of ``events``, leased by a statement begun at ``since``."""
        if not events:
            return None
        keeper = LeaseKeeper(self.store, self.worker_id, events, self.settings.lease_seconds)
        return Batch(events, keeper.start(), since)

    def _still_held(self, batch: Batch, report: Report) -> Batch | None:
        """A batch that waited half a lease or more (its worker was paused, say) may have been
        reclaimed meanwhile: keep only the rows this worker still holds, so it never publishes
        a row another worker owns. A key that lost a row is given up whole: another worker
        took its head, and the rows kept here come after it. Costs nothing for a batch that
        did not wait."""
        waited = self.clock() - batch.claimed_at
        if waited < self.settings.lease_seconds * timing.RECHECK_SHARE_OF_LEASE:
            return batch
        s = self.settings
        renewed_at = self.clock()
        if self.store.renew(self.worker_id, batch.events, s.lease_seconds) == len(batch.events):
            return batch
        kept = self.store.still_held(self.worker_id, batch.events)
        report.lost += len(batch.events) - len(kept)
        self.observer.lease_lost(len(batch.events) - len(kept))
        log.warning(
            "lease lost on %d of %d rows before publishing: another worker reclaimed them",
            len(batch.events) - len(kept),
            len(batch.events),
        )
        kept_ids = {e.id for e in kept}
        broken = {e.ordering_key for e in batch.events if e.seq is not None} & {
            e.ordering_key for e in batch.events if e.id not in kept_ids
        }
        given_up = [e for e in kept if e.seq is not None and e.ordering_key in broken]
        if given_up:
            released = self.store.release(self.worker_id, given_up, 0.0, BEHIND_A_FAILURE)
            report.released += released
            self.observer.recorded(Recorded((), (), (), released, 0, True, (0, 0, 0)))
            kept = [e for e in kept if e not in given_up]
        if not kept:
            batch.close()
            return None
        return Batch(kept, batch.keeper, renewed_at)

    def _publish(self, batch: Batch) -> _Outcome:
        """Publish a leased batch and sort the broker's verdicts into outcomes (no DB I/O)."""
        report = Report(cycles=1, claimed=len(batch.events))
        now = datetime.now(UTC)
        expired = [e for e in batch.events if task_expired(message.task_expires(e), now)]
        todo = [e for e in batch.events if e not in expired]
        result = self.observer.publish(todo, self.publisher.publish)
        behind = hold_back_after_failures(result)
        outcome = _Outcome(
            batch, report, sent=result.confirmed, unavailable=result.unavailable, behind=behind
        )
        # A Celery task past its ``expires`` is not published (a worker would only discard it).
        outcome.buried += [Buried(e, EXPIRED) for e in expired]
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

    def _unpublished(self, batch: Batch, error: str | None) -> _Outcome:
        delay = self.breaker.remaining(self.clock())
        report = Report(claimed=len(batch.events))
        return _Outcome(batch, report, unavailable=list(batch.events), error=error, delay=delay)

    def _record(self, outcome: _Outcome | None, next_limit: int) -> Batch | None:
        """Record ``outcome`` (if any) and lease up to ``next_limit`` more rows, in one
        transaction, then stop the outcome's lease keeper; retried within half a lease, since
        the broker already has the messages."""
        if outcome is None and not next_limit:
            return None
        try:
            started, since = time.perf_counter(), self.clock()
            done, events = self._retrying(lambda: self._complete(outcome, next_limit))
            if next_limit:
                self.observer.claimed(events, time.perf_counter() - started)
            if outcome is not None:
                self._account(outcome, done)
        finally:
            if outcome is not None:
                outcome.batch.close()
        return self._hold(events, since)

    def _complete(
        self, outcome: _Outcome | None, next_limit: int
    ) -> tuple[Completed, list[ClaimedEvent]]:
        verdicts: dict[str, Any] = {}
        if outcome is not None:
            verdicts = {
                "sent": outcome.sent,
                "rescheduled": outcome.rescheduled,
                "buried": outcome.buried,
                "released": outcome.released(),
            }
        if not next_limit:
            return self.store.complete(self.worker_id, **verdicts), []
        return self.store.complete_and_claim(
            self.worker_id, **verdicts, limit=next_limit, lease_seconds=self.settings.lease_seconds
        )

    def _retrying(
        self, attempt: Callable[[], tuple[Completed, list[ClaimedEvent]]]
    ) -> tuple[Completed, list[ClaimedEvent]]:
        deadline = self.clock() + self.settings.lease_seconds * timing.RECORD_RETRY_SHARE_OF_LEASE
        delay = timing.RECORD_RETRY_FIRST_SECONDS
        while True:
            try:
                return attempt()
            except StoreError as exc:
                if not exc.retryable or self.clock() + delay > deadline:
                    raise
                log.warning("recording outcomes failed, retrying in %.2fs: %s", delay, exc)
                time.sleep(delay)
                delay = min(delay * 2, timing.RECORD_RETRY_MAX_SECONDS)

    def _account(self, outcome: _Outcome, done: Completed) -> None:
        report = outcome.report
        report.sent, report.rescheduled, report.buried = done.sent, done.rescheduled, done.buried
        report.released, report.lost = done.released, done.lost
        self.observer.recorded(
            Recorded(
                sent=outcome.sent,
                rescheduled=[r.event for r in outcome.rescheduled],
                failed=[b.event for b in outcome.buried],
                released=done.released,
                lost=done.lost,
                exact=not done.lost,
                counts=(done.sent, done.rescheduled, done.buried),
            )
        )
        if report.lost:
            log.warning("lease lost on %d rows: another worker reclaimed them", report.lost)

    def loop(
        self,
        stop: threading.Event,
        *,
        idle_seconds: float | None = None,
        wake: threading.Event | None = None,
        on_pass: Callable[[], None] | None = None,
    ) -> Report:
        """Drain until ``stop`` is set; when a drain found nothing claimable left (never merely
        because a batch came back short), rest until ``wake`` is set or the tick passes.

        With ``wake`` (set by a :class:`relay.dispatch.listener.Listener` on each notification; set
        it along with ``stop`` to stop at once) the loop rests until notified or a whole tick has
        passed (the safety net); notified within ``RELAY_POLL_FLOOR_SECONDS`` of a drain that
        moved rows, it waits out the floor first, so a steady stream is claimed in batches.
        Without, it polls adaptively: ``RELAY_POLL_FLOOR_SECONDS`` after a drain that moved
        rows, doubling after each empty one up to ``idle_seconds`` (default: the tick).
        ``on_pass`` runs at the start of every pass (a liveness heartbeat): a pass lasts at most
        one drain budget plus one rest.
        """
        idle = self.settings.tick_seconds if idle_seconds is None else idle_seconds
        poll = timing.IdlePoll(min(self.settings.poll_floor_seconds, idle), idle)
        total = Report()
        db_backoff = timing.DATABASE_RETRY_FIRST_SECONDS
        while not stop.is_set():
            if on_pass is not None:
                on_pass()
            if wake is not None:
                wake.clear()  # before the claim: a notification during the drain rings again
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
            elif report.drained:
                if report.claimed:
                    poll.reset()
                if wake is None:
                    stop.wait(poll.next())
                    continue
                rested = self.clock()
                if wake.wait(idle) and report.claimed:
                    # Busy: notifications arriving within the floor of a drain that moved rows
                    # fold into one claim, so a steady stream is claimed in batches.
                    stop.wait(max(0.0, poll.floor - (self.clock() - rested)))
        return total
