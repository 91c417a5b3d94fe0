"""The connection budget of a many-databases relay process as Prometheus gauges
(``relay dispatch`` over ``RELAY_DATABASES``, :mod:`relay.runners.many.workers`), read from the
scheduler at scrape time:

- ``relay_connections_budget``: ``RELAY_MAX_CONNECTIONS``;
- ``relay_connections_in_use``: database connections the process holds now (the wake-ups'
  included);
- ``relay_databases_waiting``: databases due for a claim but waiting for a worker or a
  connection (persistently above 0: the budget is too small for the load);
- ``relay_databases``: databases this process relays.

The same endpoint serves each database's outbox gauges (labelled ``source``) as the runner last
read them within its units of work (:class:`relay.observe.gauges.ReadingsCollector`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import prometheus_client
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from relay.observe.gauges import Reading, ReadingsCollector
from relay.observe.metrics import PrometheusObserver, _listen

_HELP = {
    "budget": ("relay_connections_budget", "Database connections this process may hold"),
    "in_use": ("relay_connections_in_use", "Database connections this process holds"),
    "waiting": ("relay_databases_waiting", "Databases due for a claim, waiting for a connection"),
    "databases": ("relay_databases", "Outbox databases this process relays"),
}


class BudgetCollector(Collector):
    """Reads ``read()`` (the scheduler's
    :meth:`~relay.runners.many.workers.ManyDatabases.budget`)."""

    def __init__(self, read: Callable[[], Mapping[str, int]]) -> None:
        self.read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        values = self.read()
        for key, (name, text) in _HELP.items():
            yield GaugeMetricFamily(name, text, value=values.get(key, 0))


def serve(
    port: int,
    read: Callable[[], Mapping[str, int]],
    readings: Callable[[], Mapping[str, Reading]] | None = None,
) -> PrometheusObserver:
    """The process's endpoint: the relay's counters (every database's, labelled ``source``),
    the budget gauges, and each database's outbox gauges as ``readings()`` last read them
    (labelled ``source``). A scrape reads no database: it would take a connection from every
    database, outside the budget; the runner reads them within its units of work."""
    observer = PrometheusObserver.shared()
    prometheus_client.REGISTRY.register(BudgetCollector(read))
    if readings is not None:
        prometheus_client.REGISTRY.register(ReadingsCollector(readings))
    _listen(port, prometheus_client.REGISTRY)
    return observer
