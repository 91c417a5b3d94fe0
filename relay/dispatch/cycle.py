"""One dispatch cycle, claim -> publish -> record, and its steps: the part of a
:class:`relay.dispatch.dispatcher.Dispatcher` that its drain pipelines and its loop repeats.

Never holds a transaction or a row lock across broker I/O: the claim commits before the first
publish, the outcomes are written after the last confirm, and a lease keeper renews the lease
meanwhile. What a key's failure holds back is :mod:`relay.ordering`'s decision.
"""

from __future__ import annotations

import logging
import os
import random
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from relay import ordering
from relay.config import Settings, timing
from relay.dispatch.decisions import CircuitBreaker, RetryPolicy, refusals
from relay.dispatch.lease import LeaseKeeper
from relay.exceptions import BrokerUnavailable, StoreError
from relay.observe.observers import Observer, Recorded
from relay.policy import Backoff
from relay.publishers import Publisher
from relay.records import Buried, ClaimedEvent, Completed, Released, Rescheduled
from relay.store.dispatch_path.lease_sweep import LeaseSweep
from relay.store.dispatch_path.protocol import Store

log = logging.getLogger(__name__)


def make_worker_id() -> str:
    """``host:pid:nonce``: unique per dispatcher, readable in ``locked_by``."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass(slots=True)
class Report:
    """What one cycle, or a sum of cycles, did."""

    #: Claims made (one per cycle; an empty claim counts).
    cycles: int = 0
    #: Rows leased.
    claimed: int = 0
    #: Rows the broker confirmed, now ``sent``.
    sent: int = 0
    #: Rows back to ``pending`` with a backoff, an attempt spent.
    rescheduled: int = 0
    #: Rows dead-lettered (``failed``): past their attempts, or the row's own fault.
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


@dataclass(slots=True)
class Outcome:
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
    #: Among ``buried``: past their deadline, dead-lettered unpublished.
    expired: list[ClaimedEvent] = field(default_factory=list)
    error: str | None = None
    delay: float = 0.0

    def released(self) -> list[Released]:
        groups = []
        if self.unavailable:
            groups.append(Released(self.unavailable, self.delay, self.error or ""))
        if self.behind:
            groups.append(Released(self.behind, 0.0, ordering.BEHIND_A_FAILURE))
        return groups


@dataclass
class Cycle:
    """Claims, publishes and records one batch at a time for one worker (:meth:`run_once`);
    its steps (:meth:`claim`, :meth:`still_held`, :meth:`publish`, :meth:`record`, ...) are
    what :class:`relay.dispatch.dispatcher.Dispatcher`'s drain pipelines."""

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
    #: When a claim also looks for unordered rows whose lease expired.
    sweep: LeaseSweep = field(init=False)
    _executor: ThreadPoolExecutor | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        s = self.settings
        self.retry = RetryPolicy(s.max_attempts, s.backoff_base_seconds, s.backoff_max_seconds)
        self.breaker = CircuitBreaker(
            s.backoff_base_seconds, min(s.backoff_max_seconds, timing.BREAKER_MAX_SECONDS)
        )
        every = min(timing.SWEEP_MAX_SECONDS, s.lease_seconds * timing.SWEEP_SHARE_OF_LEASE)
        self.sweep = LeaseSweep(every)

    def run_once(self) -> Report:
        """Claim one batch, publish it, record the outcomes."""
        batch = self.claim(self.settings.batch_size)
        if batch is None:
            return Report(cycles=1, drained=True)
        with batch:
            outcome = self.publish(batch)
            self.record(outcome, next_limit=0)
        return outcome.report

    def close(self) -> None:
        """Stop the database thread (idempotent)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def db_thread(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="relay-db")
        return self._executor

    @staticmethod
    def settle(outcome: Outcome | None, total: Report) -> None:
        if outcome is not None:
            total.add(outcome.report)

    def claim(self, limit: int) -> Batch | None:
        if not self.breaker.allows(self.clock()):
            return None
        started, since = time.perf_counter(), self.clock()
        expired = self.sweep.due(self.clock())
        events = self.store.claim(
            self.worker_id, limit, self.settings.lease_seconds, expired=expired
        )
        self.observer.claimed(events, time.perf_counter() - started)
        return self._hold(events, since)

    def _hold(self, events: list[ClaimedEvent], since: float) -> Batch | None:
        """Start renewing the lease of ``events``, leased by a statement begun at ``since``."""
        if not events:
            return None
        keeper = LeaseKeeper(self.store, self.worker_id, events, self.settings.lease_seconds)
        return Batch(events, keeper.start(), since)

    def still_held(self, batch: Batch, report: Report) -> Batch | None:
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
        given_up = ordering.broken_runs(batch.events, kept)
        if given_up:
            released = self.store.release(self.worker_id, given_up, 0.0, ordering.BEHIND_A_FAILURE)
            report.released += released
            self.observer.recorded(Recorded((), (), (), released, 0, True, (0, 0, 0)))
            kept = [e for e in kept if e not in given_up]
        if not kept:
            batch.close()
            return None
        return Batch(kept, batch.keeper, renewed_at)

    def publish(self, batch: Batch) -> Outcome:
        """Publish a leased batch and sort the broker's verdicts into outcomes (no DB I/O)."""
        report = Report(cycles=1, claimed=len(batch.events))
        refused, expired = refusals(batch.events, self.settings.max_attempts, datetime.now(UTC))
        if expired:
            log.info("dead-lettered %d rows past their deadline, unpublished", len(expired))
        todo, behind = batch.events, list[ClaimedEvent]()
        if refused:
            todo, behind = ordering.behind_refusals(batch.events, [b.event for b in refused])
        result = self.observer.publish(todo, self.publisher.publish)
        behind += ordering.hold_back_after_failures(result)
        outcome = Outcome(
            batch,
            report,
            sent=result.confirmed,
            unavailable=result.unavailable,
            behind=behind,
            expired=expired,
        )
        outcome.buried += refused
        outcome.buried += [Buried(e, f"unsendable: {why}") for e, why in result.unsendable]
        if len(expired) < len(refused) or result.unsendable:
            reasons = sorted({b.error for b in outcome.buried if b.event not in expired})
            log.warning(
                "dead-lettered %d rows that cannot be sent, the rest of the batch goes on: %s%s",
                len(outcome.buried),
                reasons[0],
                f" (and {len(reasons) - 1} other reasons)" if len(reasons) > 1 else "",
            )
        for event, error in result.rejected:
            decision = self.retry.after_failure(event, error, self.rng)
            if isinstance(decision, Buried):
                outcome.buried.append(decision)
            else:
                outcome.rescheduled.append(decision)
        if result.rejected:
            # Only the counters and each row's last_error said so: a relay that sent nothing
            # because no queue was bound logged no reason at all.
            reasons = sorted({error for _, error in result.rejected})
            log.warning(
                "broker refused %d events (retried later, or failed after the last attempt): %s%s",
                len(result.rejected),
                reasons[0],
                f" (and {len(reasons) - 1} other reasons)" if len(reasons) > 1 else "",
            )
        if result.unavailable and result.error is not None and not result.error.outage:
            # Paused by the broker (a resource alarm), not out: no breaker, a look again soon,
            # so delivery resumes about as soon as it unblocks; the publisher logged it once.
            outcome.error = str(result.error)
            outcome.delay = timing.BROKER_BLOCKED_RETRY_SECONDS
            report.broker_error = outcome.error
        elif result.unavailable:
            outcome.error = str(result.error or BrokerUnavailable())
            outcome.delay = self.breaker.record_failure(self.clock())
            report.broker_error = outcome.error
            log.warning("broker unavailable, backing off %.1fs: %s", outcome.delay, outcome.error)
        else:
            self.breaker.record_success()
        return outcome

    def unpublished(self, batch: Batch, error: str | None) -> Outcome:
        delay = self.breaker.remaining(self.clock())
        report = Report(claimed=len(batch.events))
        return Outcome(batch, report, unavailable=list(batch.events), error=error, delay=delay)

    def record(
        self,
        outcome: Outcome | None,
        next_limit: int,
        following: Sequence[tuple[str, int]] = (),
    ) -> Batch | None:
        """Record ``outcome`` (if any) and lease up to ``next_limit`` more rows, in one
        transaction, then stop the outcome's lease keeper; retried within half a lease, since
        the broker already has the messages. ``following``: (key, last number) of the runs
        in flight, whose next runs the lease may take (``Store.claim``)."""
        if outcome is None and not next_limit:
            return None
        try:
            started, since = time.perf_counter(), self.clock()
            done, events = self._retrying(lambda: self._complete(outcome, next_limit, following))
            if next_limit:
                self.observer.claimed(events, time.perf_counter() - started)
            if outcome is not None:
                self._account(outcome, done)
        finally:
            if outcome is not None:
                outcome.batch.close()
        return self._hold(events, since)

    def _complete(
        self, outcome: Outcome | None, next_limit: int, following: Sequence[tuple[str, int]]
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
            self.worker_id,
            **verdicts,
            limit=next_limit,
            lease_seconds=self.settings.lease_seconds,
            expired=self.sweep.due(self.clock()),
            following=following,
        )

    def _retrying(
        self, attempt: Callable[[], tuple[Completed, list[ClaimedEvent]]]
    ) -> tuple[Completed, list[ClaimedEvent]]:
        deadline = self.clock() + self.settings.lease_seconds * timing.RECORD_RETRY_SHARE_OF_LEASE
        backoff = Backoff(timing.RECORD_RETRY_FIRST_SECONDS, timing.RECORD_RETRY_MAX_SECONDS)
        while True:
            try:
                return attempt()
            except StoreError as exc:
                delay = backoff.next()
                if not exc.retryable or self.clock() + delay > deadline:
                    raise
                log.warning("recording outcomes failed, retrying in %.2fs: %s", delay, exc)
                time.sleep(delay)

    def _account(self, outcome: Outcome, done: Completed) -> None:
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
                expired=outcome.expired,
            )
        )
        if report.lost:
            log.warning("lease lost on %d rows: another worker reclaimed them", report.lost)
