"""Prometheus metrics of a relay process (``RELAY_METRICS_PORT``), with ``prometheus_client``.

Two sources, served by one HTTP endpoint per relay process:

- the dispatcher's counters and histograms, kept by :class:`PrometheusObserver` (a
  :class:`relay.observe.observers.Observer`) in each process that dispatches;
- the outbox gauges, read from the database by one
  :class:`~relay.observe.gauges.OutboxCollector` per endpoint at scrape time (one statement of
  capped counts per database, at most once per ``min_interval`` seconds), never by the
  dispatching processes.

``relay dispatch --loop`` serves both from its own process (:func:`serve`). A prefork Celery
worker (:func:`serve_worker`, on ``worker_init``, before the pool forks) uses the client's
multiprocess mode: each child writes its counters to files in ``PROMETHEUS_MULTIPROC_DIR``
(a fresh temporary directory unless that variable is set) and the parent's endpoint adds them up,
along with the gauges it reads itself.

Labels: ``source`` (the outbox database's CloudEvents source, one per database of a fleet) and
``event_type`` at most, never an id or a key. A process keeps at most
``RELAY_METRICS_MAX_EVENT_TYPES`` event types apart, the first it sees; later ones count under
:data:`OTHER_EVENT_TYPE`: a producer that writes a new type per event must not grow the
process's memory and every scrape without bound.
"""

from __future__ import annotations

import atexit
import bisect
import logging
import os
import shutil
import tempfile
import threading
import time
from collections import Counter as Tally
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values
from prometheus_client.multiprocess import MultiProcessCollector

from relay.exceptions import ConfigError
from relay.observe.gauges import GAUGE_CAP, GAUGE_MIN_INTERVAL_SECONDS, OutboxCollector
from relay.observe.observers import Observer, Recorded, Send
from relay.records import ClaimedEvent, PublishResult

log = logging.getLogger(__name__)


#: The ``event_type`` label of every type past the cap (``RELAY_METRICS_MAX_EVENT_TYPES``).
OTHER_EVENT_TYPE = "other"
#: Distinct ``event_type`` label values one process keeps apart unless told otherwise.
DEFAULT_MAX_EVENT_TYPES = 100

_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_LAG = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)


class PrometheusObserver(Observer):
    """Counts what one process's dispatchers claim, publish and record."""

    _shared: PrometheusObserver | None = None
    _lock = threading.Lock()

    def __init__(
        self,
        registry: CollectorRegistry | None = prometheus_client.REGISTRY,
        *,
        max_event_types: int = DEFAULT_MAX_EVENT_TYPES,
    ) -> None:
        #: Event types kept apart, first come first served; the rest count as "other".
        self.max_event_types = max_event_types
        self._types: set[str] = set()
        self._types_lock = threading.Lock()
        # source: the database the rows came from (its CloudEvents source), one value per
        # outbox database of the fleet, never an id or a key.
        by_type = ["source", "event_type"]
        r = registry
        self.claimed_total = Counter(
            "relay_events_claimed", "Rows leased by this relay.", registry=r
        )
        self.sent_total = Counter(
            "relay_events_sent", "Rows marked sent after the broker confirmed.", by_type, registry=r
        )
        self.rescheduled_total = Counter(
            "relay_events_rescheduled",
            "Failed attempts with attempts left: back to pending after a backoff.",
            by_type,
            registry=r,
        )
        self.failed_total = Counter(
            "relay_events_failed", "Rows that ended failed (dead letters).", by_type, registry=r
        )
        self.expired_total = Counter(
            "relay_events_expired",
            "Rows dead-lettered unpublished because their deadline (expires_at) had passed; "
            "also counted in relay_events_failed.",
            by_type,
            registry=r,
        )
        self.released_total = Counter(
            "relay_events_released",
            "Rows given back without spending an attempt (broker down, behind a failed row).",
            registry=r,
        )
        self.lease_lost_total = Counter(
            "relay_lease_lost",
            "Rows another worker reclaimed before this one recorded them (expired leases).",
            registry=r,
        )
        self.publish_seconds = Histogram(
            "relay_publish_seconds",
            "Publishing one batch, until the broker's last confirm.",
            buckets=_FAST,
            registry=r,
        )
        self.claim_seconds = Histogram(
            "relay_claim_seconds",
            "The transaction that leased a batch (while draining it also records the last one).",
            buckets=_FAST,
            registry=r,
        )
        self.lag_seconds = Histogram(
            "relay_delivery_lag_seconds",
            "From a row's created_at to the relay recording it sent.",
            buckets=_LAG,
            registry=r,
        )
        self.broker_blocked_gauge = Gauge(
            "relay_broker_blocked",
            "1 while the events broker blocks this relay's publishing (a memory or disk alarm).",
            multiprocess_mode="livemax",
            registry=r,
        )
        # What an alert needs to tell "the broker is out" and "nothing is delivered" apart
        # from a quiet outbox: the breaker's state and the time of the last confirm, both
        # read off the publish result the cycle sorts, so the dispatch path is unchanged.
        self.breaker_open_gauge = Gauge(
            "relay_breaker_open",
            "1 while the circuit breaker is open: the last publish found the broker unreachable "
            "and none has succeeded since.",
            multiprocess_mode="livemax",
            registry=r,
        )
        self.last_sent_gauge = Gauge(
            "relay_last_publish_success_timestamp_seconds",
            "Unix time of the last batch the broker confirmed (0: none since the start).",
            multiprocess_mode="max",
            registry=r,
        )
        self._children: dict[tuple[int, str, str], Any] = {}

    @classmethod
    def shared(cls, max_event_types: int | None = None) -> PrometheusObserver:
        """The process's observer, on the default registry (created once; metric names are
        unique in a registry); ``max_event_types``, when given, becomes its cap."""
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls()
            if max_event_types is not None:
                cls._shared.max_event_types = max_event_types
            return cls._shared

    def event_type_label(self, event_type: str) -> str:
        """``event_type`` if it is one of the first ``max_event_types`` seen, else "other"."""
        if event_type in self._types:
            return event_type
        with self._types_lock:
            if len(self._types) < self.max_event_types:
                self._types.add(event_type)
                return event_type
        return OTHER_EVENT_TYPE

    def _child(self, counter: Counter, source: str, event_type: str) -> Any:
        """The counter's child for a label value :meth:`event_type_label` gave."""
        key = (id(counter), source, event_type)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = counter.labels(source, event_type)
        return child

    def _count(self, counter: Counter, events: Iterable[ClaimedEvent]) -> None:
        label = self.event_type_label
        for (source, event_type), n in Tally(
            (e.source or "", label(e.event_type)) for e in events
        ).items():
            self._child(counter, source, event_type).inc(n)

    def claimed(self, events: Sequence[ClaimedEvent], seconds: float) -> None:
        self.claim_seconds.observe(seconds)
        if events:
            self.claimed_total.inc(len(events))

    def publish(self, events: list[ClaimedEvent], send: Send) -> PublishResult:
        started = time.perf_counter()
        try:
            result = send(events)
        finally:
            self.publish_seconds.observe(time.perf_counter() - started)
        self.published(result)
        return result

    def published(self, result: PublishResult) -> None:
        """The breaker's state and the last confirm after ``result``, as the cycle reads it
        (:meth:`relay.dispatch.cycle.Cycle.publish`): an outage opens the breaker, a broker's
        resource alarm does not (that is ``relay_broker_blocked``), any other result closes it."""
        if result.confirmed:
            self.last_sent_gauge.set(time.time())
        if not result.unavailable:
            self.breaker_open_gauge.set(0)
        elif result.error is None or result.error.outage:
            self.breaker_open_gauge.set(1)

    def recorded(self, outcome: Recorded) -> None:
        kinds = (
            (self.sent_total, outcome.sent),
            (self.rescheduled_total, outcome.rescheduled),
            (self.failed_total, outcome.failed),
        )
        for (counter, events), n in zip(kinds, outcome.counts, strict=True):
            if n == len(events):
                self._count(counter, events)
            elif n:  # the fence refused some of them, which ones is not known: no event type
                self._child(counter, events[0].source or "", self.event_type_label("")).inc(n)
        if outcome.expired and outcome.counts[2] == len(outcome.failed):
            self._count(self.expired_total, outcome.expired)
        if outcome.released:
            self.released_total.inc(outcome.released)
        if outcome.lost:
            self.lease_lost_total.inc(outcome.lost)
        if outcome.sent and outcome.counts[0] == len(outcome.sent):
            now = datetime.now(UTC)
            lags = [max(0.0, (now - e.created_at).total_seconds()) for e in outcome.sent]
            observe_many(self.lag_seconds, lags)

    def lease_lost(self, count: int) -> None:
        self.lease_lost_total.inc(count)

    def broker_blocked(self, reason: str | None) -> None:
        self.broker_blocked_gauge.set(0 if reason is None else 1)


def observe_many(histogram: Histogram, amounts: Sequence[float]) -> None:
    """``histogram.observe(a)`` for each of ``amounts``, with one increment per bucket touched
    and one of the sum, instead of two per amount: a batch's lags cost a few increments (each a
    locked write, to a file in multiprocess mode). Falls back to ``observe`` should the client's
    internals ever differ from what this expects."""
    bounds: Any = getattr(histogram, "_upper_bounds", None)
    buckets: Any = getattr(histogram, "_buckets", None)
    total: Any = getattr(histogram, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for amount in amounts:
            histogram.observe(amount)
        return
    # The client counts an amount in the first bucket whose bound is >= it (the last is +Inf).
    for index, n in Tally(bisect.bisect_left(bounds, a) for a in amounts).items():
        buckets[index].inc(n)
    total.inc(sum(amounts))


def _listen(port: int, registry: CollectorRegistry) -> None:
    try:
        prometheus_client.start_http_server(port, registry=registry)
    except OSError as exc:
        raise ConfigError(f"RELAY_METRICS_PORT={port} cannot be served: {exc}") from exc
    log.info("metrics on http://0.0.0.0:%d/metrics", port)


def serve(port: int, store: Any) -> PrometheusObserver:
    """One process's endpoint (``relay dispatch --loop``): the default registry (the relay's
    metrics, the process collector) and the outbox gauges read through ``store``."""
    observer = PrometheusObserver.shared()
    collector = OutboxCollector(store)
    prometheus_client.REGISTRY.register(collector)
    try:
        _listen(port, prometheus_client.REGISTRY)
    except ConfigError:
        prometheus_client.REGISTRY.unregister(collector)
        raise
    return observer


def serve_worker(port: int, store: Any) -> str:
    """A Celery worker's endpoint, started in the parent before the pool forks: multiprocess
    mode, so the children's counters add up here. Returns the metrics directory."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        directory = tempfile.mkdtemp(prefix="relay-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        atexit.register(_remove, directory, os.getpid())
    os.makedirs(directory, exist_ok=True)
    # The client picks its value class when first imported; the variable may be newer.
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]  # untyped in the client
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]  # untyped in the client
    registry.register(OutboxCollector(store))
    _listen(port, registry)
    return directory


def _remove(directory: str, owner: int) -> None:
    if os.getpid() == owner:  # a forked child runs atexit too
        shutil.rmtree(directory, ignore_errors=True)


__all__ = [
    "DEFAULT_MAX_EVENT_TYPES",
    "GAUGE_CAP",
    "GAUGE_MIN_INTERVAL_SECONDS",
    "OTHER_EVENT_TYPE",
    "OutboxCollector",
    "PrometheusObserver",
    "observe_many",
    "serve",
    "serve_worker",
]
