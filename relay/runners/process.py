"""What every relay process does beside its runner: stack dumps on a signal, the metrics
endpoint (a Celery worker's too) and the garbage collector's settings of a relay loop."""

from __future__ import annotations

import faulthandler
import gc
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


#: Allocations between two collections of the youngest generation in a relay loop (CPython's
#: default: 700). A claim of 1,000 rows allocates some 20,000 objects that live until its
#: outcomes are recorded: at 700 the collector walked them over and over and promoted them
#: into the older generations, which it then walked in full.
YOUNG_COLLECTION_THRESHOLD = 10_000


def settle_heap() -> None:
    """Once the relay is built: what start-up made (modules, engines, the runtime) leaves the
    collector's generations for good (:func:`gc.freeze`), so no full collection walks it again,
    and the youngest generation is collected every :data:`YOUNG_COLLECTION_THRESHOLD`
    allocations. Cycles are still collected; only less often. Measured: the collector's share
    of a relay's CPU per event (4 ``relay dispatch --loop``, batches up to 1,000) from about
    6-9 µs to about 4.5 (docs/benchmarks.md, "Where an event's CPU goes")."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, older, oldest)


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
