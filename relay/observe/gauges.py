"""The outbox gauges of a metrics endpoint: one database's :class:`Reading` (:func:`read`, a
few capped counts through an operations store) and the Prometheus families it makes.

One :class:`OutboxCollector` per endpoint reads each database at scrape time, at most once per
``min_interval`` seconds, never from the dispatching processes. A relay over many databases in
one process (``RELAY_DATABASES``) reads each database's on the connection its own unit of work
holds, within the connection budget, and serves the last readings
(:class:`ReadingsCollector`). Over one database the gauges carry no database label
(``relay_outbox_rows{status}``); over several every gauge carries ``source``, the database's
name, so one endpoint shows each database.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

#: Each database gauge counts at most this many rows: a scrape costs a bounded scan.
GAUGE_CAP = 100_000
#: The gauges are read at most this often; scrapes in between get the last reading.
GAUGE_MIN_INTERVAL_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Reading:
    """One database's gauges as last read; ``up`` False: the read failed (no other gauge)."""

    up: bool
    counts: Mapping[str, int] = field(default_factory=dict)
    oldest_pending_age: float = 0.0
    expired_leases: int = 0
    stalled_keys: int = 0
    #: Rows past the retention and the oldest sent row's age (None: not readable).
    retention: tuple[int, float] | None = None
    #: Pauses in force, rows they hold, the oldest's age (None: no relay_pauses yet).
    pauses: tuple[int, int, float] | None = None
    took: float = 0.0


def read(store: Any, cap: int = GAUGE_CAP) -> Reading:
    """``store``'s (an operations store's) gauges, each count stopped at ``cap``; a failure is
    logged and read as down, one of the optional parts as missing."""
    started = time.perf_counter()
    try:
        report = store.gauges(cap)
    except Exception as exc:
        log.warning("metrics: reading the outbox gauges failed: %s", exc)
        return Reading(up=False)
    retention = pauses = None
    try:
        behind_rows, oldest = store.retention_gauges()
        retention = (behind_rows, oldest or 0.0)
    except Exception as exc:  # the purge's gauges (docs/retention.md), where known
        log.warning("metrics: reading the retention gauges failed: %s", exc)
    try:
        pauses = store.pause_gauges(cap)
    except Exception as exc:  # a database not migrated to 0015 yet has no relay_pauses
        log.warning("metrics: reading the pause gauges failed: %s", exc)
    return Reading(
        up=True,
        counts=dict(report.counts),
        oldest_pending_age=report.oldest_pending_age_seconds or 0.0,
        expired_leases=report.expired_leases,
        stalled_keys=report.stalled_keys,
        retention=retention,
        pauses=pauses,
        took=time.perf_counter() - started,
    )


def families(
    readings: Mapping[str, Reading], *, labelled: bool, cap: int = GAUGE_CAP
) -> list[Metric]:
    """The gauge families of ``readings`` (``{source: reading}``; with ``labelled`` False,
    one reading and no ``source`` label); a family no reading has is left out."""
    extra = ("source",) if labelled else ()

    def family(name: str, text: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, text, labels=[*extra, *labels])

    out = {
        "up": family("relay_outbox_up", "1 when the last read of the outbox worked."),
        "rows": family(
            "relay_outbox_rows",
            f"Outbox rows per unfinished status, each counted up to {cap}.",
            ("status",),
        ),
        "age": family(
            "relay_oldest_pending_age_seconds", "Age of the oldest pending row (0: none)."
        ),
        "expired": family(
            "relay_expired_leases",
            f"Processing rows whose lease expired (a dead or stalled worker's), up to {cap}.",
        ),
        "stalled": family(
            "relay_stalled_keys",
            "Ordering keys whose next row cannot be claimed: a failed head, or a number no "
            f"row has (relay doctor names them), up to {cap}.",
        ),
        "behind": family(
            "relay_outbox_purge_behind_rows",
            "Sent rows past the retention the last purge run left "
            "(0: it caught up; counted up to 100,000).",
        ),
        "sent_age": family(
            "relay_oldest_sent_age_seconds", "Age of the oldest sent row kept (0: none)."
        ),
        "pauses": family(
            "relay_pauses", "Pauses in force (relay pause): event types, keys, the database."
        ),
        "paused_rows": family(
            "relay_paused_rows",
            f"Pending rows held back by the pauses in force, counted up to {cap}.",
        ),
        "pause_age": family(
            "relay_oldest_pause_age_seconds", "Age of the oldest pause in force (0: none)."
        ),
        "took": family("relay_outbox_read_seconds", "How long the last read took."),
    }
    seen: set[str] = set()
    for name, r in readings.items():
        source = [name] if labelled else []
        out["up"].add_metric(source, 1 if r.up else 0)
        seen.add("up")
        if not r.up:
            continue
        for status, n in sorted(r.counts.items()):
            out["rows"].add_metric([*source, status], n)
        out["age"].add_metric(source, r.oldest_pending_age)
        out["expired"].add_metric(source, r.expired_leases)
        out["stalled"].add_metric(source, r.stalled_keys)
        out["took"].add_metric(source, r.took)
        seen |= {"rows", "age", "expired", "stalled", "took"}
        if r.retention is not None:
            out["behind"].add_metric(source, r.retention[0])
            out["sent_age"].add_metric(source, r.retention[1])
            seen |= {"behind", "sent_age"}
        if r.pauses is not None:
            for key, value in zip(("pauses", "paused_rows", "pause_age"), r.pauses, strict=True):
                out[key].add_metric(source, value)
            seen |= {"pauses", "paused_rows", "pause_age"}
    return [f for key, f in out.items() if key in seen]


class OutboxCollector(Collector):
    """The outbox gauges of ``store`` (an operations store), or of each store of a mapping
    ``{name: store}`` labelled ``source=name``, read at scrape time; a failed read reports
    ``relay_outbox_up 0`` and no other gauge for that database."""

    def __init__(
        self,
        store: Any,
        *,
        cap: int = GAUGE_CAP,
        min_interval: float = GAUGE_MIN_INTERVAL_SECONDS,
    ) -> None:
        self.labelled = isinstance(store, Mapping)
        self.stores: dict[str, Any] = dict(store) if self.labelled else {"": store}
        self.cap, self.min_interval = cap, min_interval
        self._lock = threading.Lock()
        self._read_at = -float("inf")
        self._last: list[Metric] = []

    @property
    def store(self) -> Any:
        """The one database's store (the first, over several)."""
        return next(iter(self.stores.values()))

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if time.monotonic() - self._read_at >= self.min_interval:
                readings = {name: read(store, self.cap) for name, store in self.stores.items()}
                self._last = families(readings, labelled=self.labelled, cap=self.cap)
                self._read_at = time.monotonic()
            return iter(list(self._last))

    def describe(self) -> Iterator[Metric]:
        return iter(())  # read at scrape time only: registering must not query the database


class ReadingsCollector(Collector):
    """Serves readings taken elsewhere (``readings()``: ``{source: Reading}``), labelled
    ``source``: a many-databases relay reads each database within its own units of work."""

    def __init__(self, readings: Callable[[], Mapping[str, Reading]]) -> None:
        self.readings = readings

    def collect(self) -> Iterator[Metric]:
        return iter(families(self.readings(), labelled=True))

    def describe(self) -> Iterator[Metric]:
        return iter(())


__all__ = [
    "GAUGE_CAP",
    "GAUGE_MIN_INTERVAL_SECONDS",
    "OutboxCollector",
    "Reading",
    "ReadingsCollector",
    "families",
    "read",
]
