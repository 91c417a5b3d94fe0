"""What every relay process does beside its runner: stack dumps on a signal and the metrics
endpoint (a Celery worker's too)."""

from __future__ import annotations

import faulthandler
import logging
import signal
from typing import TYPE_CHECKING, Any

from relay.config import Settings

if TYPE_CHECKING:
    from relay.store.operations.store import OperationsStore

log = logging.getLogger("relay")


def dump_stacks_on(sig: signal.Signals) -> None:
    """``kill -USR1`` prints every thread's stack to stderr, as a Celery worker does: what a
    relay that seems stuck is waiting on. Written by the interpreter itself, at any moment,
    whatever the threads hold."""
    try:
        faulthandler.register(sig, all_threads=True, chain=False)
    except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is an OSError
        # No file descriptor behind sys.stderr (run in a process that captures it): no dump.
        log.debug("no stack dump on %s: sys.stderr has no file descriptor", sig.name)


def serve_metrics(settings: Settings, operations: OperationsStore) -> None:
    """With ``RELAY_METRICS_PORT`` set, serve this process's metrics and the outbox gauges
    (read through ``operations``)."""
    if settings.metrics_port is not None:
        from relay.observe import metrics

        metrics.serve(settings.metrics_port, operations)


def serve_worker_metrics(settings: Settings) -> None:
    """In a Celery worker's main process, before the pool forks: the endpoint in multiprocess
    mode, its outbox gauges read on connections it does not pool (of each database, labelled
    ``source``, when the worker drains several; :func:`relay.observe.metrics.serve_worker`)."""
    if settings.metrics_port is None:
        return
    from sqlalchemy.pool import NullPool

    from relay.config.databases import each, several_databases
    from relay.observe import metrics
    from relay.store.operations.store import OperationsStore

    if several_databases(settings):  # one endpoint per worker: every database's gauges, by source
        stores: Any = {
            name: OperationsStore.from_url(s.database_url, poolclass=NullPool)
            for name, s in each(settings)
        }
    else:
        stores = OperationsStore.from_url(settings.database_url, poolclass=NullPool)
    metrics.serve_worker(settings.metrics_port, stores)
