"""The :class:`Dispatcher`: one database's relay for one worker. It holds a
:class:`~relay.dispatch.cycle.Cycle` (claim -> publish -> record and their steps) and pipelines
the cycle's steps into a drain, and drains into the loop of ``relay dispatch --loop``.

Framework-free: Celery's task and ``relay dispatch`` both drive this. No transaction is open
across broker I/O, and at most two batches are leased at once.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from relay import ordering, publishers
from relay.config import Settings, timing
from relay.dispatch.batching import BatchSizer
from relay.dispatch.cycle import Batch, Cycle, Outcome, Report, make_worker_id
from relay.dispatch.decisions import EXPIRED, CircuitBreaker
from relay.exceptions import StoreError
from relay.observe.observers import Recorded
from relay.policy import Backoff
from relay.publishers import Publisher
from relay.store.dispatch_path.protocol import Store
from relay.store.dispatch_path.store import DispatchStore
from relay.wakeup.polling import IdlePoll

log = logging.getLogger(__name__)


class Dispatcher:
    """Moves events from the outbox to the broker for one worker: one cycle at a time
    (:meth:`run_once`), a pipelined drain, or a loop of drains. ``kwargs`` go to its
    :class:`~relay.dispatch.cycle.Cycle` (``worker_id``, ``rng``, ``clock``, ``observer``)."""

    def __init__(self, store: Store, publisher: Publisher, settings: Settings, **kwargs: Any):
        self.cycle = Cycle(store, publisher, settings, **kwargs)
        # The cycle's parts, fixed for its life (only the publisher may be lent another).
        self.store, self.settings, self.clock = store, settings, self.cycle.clock
        self.worker_id, self.observer = self.cycle.worker_id, self.cycle.observer
        self.breaker: CircuitBreaker = self.cycle.breaker

    @property
    def publisher(self) -> Publisher:
        return self.cycle.publisher

    @publisher.setter
    def publisher(self, publisher: Publisher) -> None:
        self.cycle.publisher = publisher

    def run_once(self) -> Report:
        """Claim one batch, publish it, record the outcomes."""
        return self.cycle.run_once()

    def close(self) -> None:
        """Stop the database thread (idempotent)."""
        self.cycle.close()

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        store: Store | None = None,
        publisher: Publisher | None = None,
        engine_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Dispatcher:
        """The dispatcher ``settings`` describe: a store on ``RELAY_DATABASE_URL`` (its engine
        built with ``engine_options``) and the publisher :func:`relay.publishers.for_url` picks
        for ``RELAY_EVENTS_URL``; either may be passed in instead. ``kwargs`` go to the
        constructor (``worker_id``, ``rng``, ``observer``, ...)."""
        s = settings
        if store is None:
            store = DispatchStore.from_settings(s, **(engine_options or {}))
        if publisher is None:
            observer = kwargs.get("observer")
            publisher = publishers.for_settings(
                s, None if observer is None else observer.broker_blocked
            )
        return cls(store, publisher, s, **kwargs)

    def drain(
        self, budget_seconds: float | None = None, stop: threading.Event | None = None
    ) -> Report:
        """Claim, publish and record batches until a claim finds nothing, the time budget is
        spent or ``stop`` is set (a warm shutdown: the batches in hand are published and
        recorded). ``Report.drained`` tells the first case from the others.

        Pipelined: while batch N is published (broker I/O, this thread), the database thread
        records batch N-1's outcomes and leases batch N+1 in one short transaction, the next
        runs of the keys N holds among it (a hot key's next run is leased while this one is
        confirmed). No transaction is ever open across broker I/O; at most two batches are
        leased at once, each within ``RELAY_BATCH_MAX_BYTES``. A key's next run is published
        only after the run before it was recorded: a batch that continues a key of the batch
        before it waits for that one's outcomes to commit, and what follows a row of the key
        that did not go through is given back unpublished. Claims grow from
        ``RELAY_BATCH_SIZE`` to ``RELAY_BATCH_MAX`` while they come back full
        (:class:`relay.dispatch.batching.BatchSizer`).
        """
        cycle = self.cycle
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
        batch = sized(sizer.size, cycle.claim(sizer.size))
        published: Outcome | None = None  # published, its outcomes not yet recorded
        try:
            while batch is not None:
                batch = cycle.still_held(batch, total)
                if batch is None:
                    break
                if published is not None and (
                    ordering.keys_of(published.batch.events) & ordering.keys_of(batch.events)
                ):
                    batch, published = self._record_first(published, batch, total), None
                    if batch is None:  # every row leased ahead was given back: look again
                        if not going():
                            break
                        batch = sized(sizer.size, cycle.record(None, next_limit=sizer.size))
                        total.drained = batch is None
                        continue
                asked = sizer.size if going() else 0
                following = ordering.run_ends(batch.events) if asked else []
                ahead = cycle.db_thread().submit(cycle.record, published, asked, following)
                outcome = cycle.publish(batch)
                batch = ahead.result()
                if batch is not None:
                    sized(asked, batch)
                cycle.settle(published, total)
                published = outcome
                if outcome.unavailable:
                    if batch is not None:  # the broker is down: give back the batch ahead
                        handed_back, batch = cycle.unpublished(batch, outcome.error), None
                        cycle.record(handed_back, next_limit=0)
                        cycle.settle(handed_back, total)
                    break
                if batch is None:
                    if not going():
                        continue
                    # The lease ahead found nothing, maybe only because the batch just
                    # published still holds its keys: record it, then look again, as many
                    # rows as the ahead claim asked for (a key's runs keep their length).
                    asked = sizer.size
                    batch = sized(asked, cycle.record(published, next_limit=asked))
                    cycle.settle(published, total)
                    published = None
                    total.drained = batch is None
            if published is not None:
                cycle.record(published, next_limit=0)
                cycle.settle(published, total)
                published = None
        finally:
            for leftover in (published.batch if published else None, batch):
                if leftover is not None:
                    leftover.close()
        if total.cycles == 0:  # the first claim found nothing (or the breaker is open)
            total.cycles, total.drained = 1, True
        return total

    def _record_first(self, published: Outcome, batch: Batch, total: Report) -> Batch | None:
        """Record ``published`` before ``batch``, which continues some of its keys, is
        published: a key's next run goes out only after the run before it was recorded. The
        rows of ``batch`` whose key did not all go through in ``published`` (a failure held
        the key) are given back in the same transaction, and if ``published`` lost a lease,
        the rows of its keys too (another worker publishes those keys now). Returns what is
        left of ``batch`` to publish."""
        cycle = self.cycle
        failed = [*published.unavailable, *published.behind]
        failed += [r.event for r in published.rescheduled] + [b.event for b in published.buried]
        kept, behind = ordering.split_keys(batch.events, ordering.keys_of(failed))
        published.behind += behind
        cycle.record(published, next_limit=0)
        cycle.settle(published, total)
        if published.report.lost:
            kept, given_up = ordering.split_keys(kept, ordering.keys_of(published.batch.events))
            if given_up:
                released = self.store.release(
                    self.worker_id, given_up, 0.0, ordering.BEHIND_A_FAILURE
                )
                total.released += released
                self.observer.recorded(Recorded((), (), (), released, 0, True, (0, 0, 0)))
        if not kept:
            batch.close()
            return None
        if len(kept) == len(batch.events):
            return batch
        return Batch(kept, batch.keeper, batch.claimed_at)

    def loop(
        self,
        stop: threading.Event,
        *,
        idle_seconds: float | None = None,
        wake: threading.Event | None = None,
        on_pass: Callable[[], None] | None = None,
        on_claim: Callable[[], None] | None = None,
    ) -> Report:
        """Drain until ``stop`` is set; when a drain found nothing claimable left (never merely
        because a batch came back short), rest until ``wake`` is set or the tick passes.

        With ``wake`` (set by a :class:`relay.wakeup.watcher.SequenceWatcher` at most once per
        ``RELAY_POLL_FLOOR_SECONDS`` while rows keep coming; set it along with ``stop`` to stop
        at once) the loop rests until woken or its adaptive poll
        is due, whichever comes first, then drains at once.
        Without, it polls adaptively: ``RELAY_POLL_FLOOR_SECONDS`` after a drain that moved
        rows (held there for about one idle wait), then doubling after each empty one up to
        ``idle_seconds`` (default: ``Settings.idle_poll_seconds``; with ``wake``, the tick).
        ``on_pass`` runs at the start of every pass and every
        :data:`~relay.config.timing.HEARTBEAT_REST_SECONDS` of a rest (a liveness heartbeat):
        a relay waiting out an outage (its breaker open, the database's retry backoff) is alive,
        one stuck in a drain is not. ``on_claim`` runs just before every drain (the watcher
        counts the claim as one of its looks).
        """
        if idle_seconds is not None:
            idle = idle_seconds
        else:
            idle = (
                self.settings.tick_seconds if wake is not None else self.settings.idle_poll_seconds
            )
        floor = min(self.settings.poll_floor_seconds, idle)
        # Polling, an empty claim may only mean that another relay took the rows: stay at the
        # floor for about one idle wait after activity, so a trickle shared by several relays
        # is claimed at the floor, not at a wait each one doubled on the other's behalf.
        hold = 0 if wake is not None else math.ceil(idle / floor)
        poll = IdlePoll(floor, idle, hold=hold)
        total = Report()
        db_backoff = Backoff(timing.DATABASE_RETRY_FIRST_SECONDS, timing.DATABASE_RETRY_MAX_SECONDS)
        while not stop.is_set():
            if on_pass is not None:
                on_pass()
            if wake is not None:
                wake.clear()  # before the claim: a wake-up during the drain rings again
            if on_claim is not None:
                on_claim()
            try:
                report = self.drain(stop=stop)
            except StoreError as exc:
                if not exc.retryable:
                    raise
                delay = db_backoff.next()
                log.warning("database unavailable, retrying in %.1fs: %s", delay, exc)
                _rest(stop, delay, on_pass)
                continue
            db_backoff.reset()
            total.add(report)
            if report.broker_error:
                wait = max(self.breaker.remaining(self.clock()), timing.BROKER_REST_MIN_SECONDS)
                _rest(stop, wait, on_pass)
            elif report.drained:
                if report.claimed:
                    poll.reset()
                if wake is None:
                    _rest(stop, poll.next(), on_pass)
                    continue
                # Woken by the watcher, or at the adaptive poll's next look (the tick at most).
                _rest(wake, poll.next(), on_pass)
        return total


def _rest(event: threading.Event, seconds: float, on_pass: Callable[[], None] | None) -> None:
    """Wait ``seconds`` or until ``event`` is set, calling ``on_pass`` every
    :data:`~relay.config.timing.HEARTBEAT_REST_SECONDS` meanwhile."""
    if on_pass is None:
        event.wait(seconds)
        return
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if event.wait(min(left, timing.HEARTBEAT_REST_SECONDS)):
            return
        on_pass()


__all__ = [
    "EXPIRED",
    "Batch",
    "Dispatcher",
    "Report",
    "make_worker_id",
]
