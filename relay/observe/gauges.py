"""The outbox gauges of a metrics endpoint, read from the database at scrape time.

One :class:`OutboxCollector` per endpoint reads one statement of capped counts per database, at
most once per ``min_interval`` seconds, never from the dispatching processes. Over one database
the gauges carry no database label (``relay_outbox_rows{status}``); over several
(``RELAY_DATABASES``, a Celery worker's endpoint) every gauge carries ``source``, the
database's name, so one endpoint shows each database.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

#: Each database gauge counts at most this many rows: a scrape costs a bounded scan.
GAUGE_CAP = 100_000
#: The gauges are read at most this often; scrapes in between get the last reading.
GAUGE_MIN_INTERVAL_SECONDS = 5.0


class OutboxCollector(Collector):
    """The outbox gauges of ``store`` (an operations store), or of each store of a mapping
    ``{name: store}`` labelled ``source=name``; a failed read reports ``relay_outbox_up 0``
    and no other gauge for that database."""

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
                self._last = self._read()
                self._read_at = time.monotonic()
            return iter(list(self._last))

    def describe(self) -> Iterator[Metric]:
        return iter(())  # read at scrape time only: registering must not query the database

    def _family(self, name: str, text: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            name, text, labels=[*(("source",) if self.labelled else ()), *labels]
        )

    def _read(self) -> list[Metric]:
        cap = self.cap
        families = {
            "up": self._family("relay_outbox_up", "1 when the last read of the outbox worked."),
            "rows": self._family(
                "relay_outbox_rows",
                f"Outbox rows per unfinished status, each counted up to {cap}.",
                ("status",),
            ),
            "age": self._family(
                "relay_oldest_pending_age_seconds", "Age of the oldest pending row (0: none)."
            ),
            "expired": self._family(
                "relay_expired_leases",
                f"Processing rows whose lease expired (a dead or stalled worker's), up to {cap}.",
            ),
            "stalled": self._family(
                "relay_stalled_keys",
                "Ordering keys whose next row cannot be claimed: a failed head, or a number no "
                f"row has (relay doctor names them), up to {cap}.",
            ),
            "behind": self._family(
                "relay_outbox_purge_behind_rows",
                "Sent rows past the retention the last purge run left "
                "(0: it caught up; counted up to 100,000).",
            ),
            "sent_age": self._family(
                "relay_oldest_sent_age_seconds", "Age of the oldest sent row kept (0: none)."
            ),
            "pauses": self._family(
                "relay_pauses", "Pauses in force (relay pause): event types, keys, the database."
            ),
            "paused_rows": self._family(
                "relay_paused_rows",
                f"Pending rows held back by the pauses in force, counted up to {cap}.",
            ),
            "pause_age": self._family(
                "relay_oldest_pause_age_seconds", "Age of the oldest pause in force (0: none)."
            ),
            "took": self._family("relay_outbox_read_seconds", "How long the last read took."),
        }
        seen = set()
        for name, store in self.stores.items():
            seen |= self._read_one(store, [name] if self.labelled else [], families)
        return [f for key, f in families.items() if key in seen]

    def _read_one(
        self, store: Any, source: list[str], families: dict[str, GaugeMetricFamily]
    ) -> set[str]:
        """Add one database's samples to ``families``; the names of those it added to."""
        started = time.perf_counter()
        try:
            report = store.gauges(self.cap)
        except Exception as exc:
            log.warning("metrics: reading the outbox gauges failed: %s", exc)
            families["up"].add_metric(source, 0)
            return {"up"}
        families["up"].add_metric(source, 1)
        for status, n in sorted(report.counts.items()):
            families["rows"].add_metric([*source, status], n)
        families["age"].add_metric(source, report.oldest_pending_age_seconds or 0.0)
        families["expired"].add_metric(source, report.expired_leases)
        families["stalled"].add_metric(source, report.stalled_keys)
        added = {"up", "rows", "age", "expired", "stalled", "took"}
        try:
            behind_rows, oldest = store.retention_gauges()
        except Exception as exc:  # the purge's gauges (docs/retention.md), where known
            log.warning("metrics: reading the retention gauges failed: %s", exc)
        else:
            families["behind"].add_metric(source, behind_rows)
            families["sent_age"].add_metric(source, oldest or 0.0)
            added |= {"behind", "sent_age"}
        try:
            pauses, held, pause_age = store.pause_gauges(self.cap)
        except Exception as exc:  # a database not migrated to 0015 yet has no relay_pauses
            log.warning("metrics: reading the pause gauges failed: %s", exc)
        else:
            families["pauses"].add_metric(source, pauses)
            families["paused_rows"].add_metric(source, held)
            families["pause_age"].add_metric(source, pause_age)
            added |= {"pauses", "paused_rows", "pause_age"}
        families["took"].add_metric(source, time.perf_counter() - started)
        return added


__all__ = ["GAUGE_CAP", "GAUGE_MIN_INTERVAL_SECONDS", "OutboxCollector"]
