"""The database ceiling: ``Store.claim`` then ``Store.mark_sent`` in a loop, no broker at all.

Run as ``python -m bench.sqlonly`` with ``RELAY_DATABASE_URL`` and ``RELAY_BATCH_SIZE``; it
loops until SIGTERM. Two commits per batch, exactly the relay's database work.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from bench.procs import BENCH_READY
from relay.dispatcher import make_worker_id
from relay.store import Store


def run(database_url: str, batch_size: int, stop: threading.Event, idle: float) -> int:
    """Claim and mark sent until ``stop`` is set; returns how many rows moved."""
    store = Store.from_url(database_url)
    worker = make_worker_id()
    moved = 0
    print(BENCH_READY, file=sys.stderr, flush=True)
    try:
        while not stop.is_set():
            events = store.claim(worker, batch_size, 30.0)
            if events:
                moved += store.mark_sent(worker, events)
            if len(events) < batch_size:
                stop.wait(idle)
    finally:
        store.dispose()
    return moved


def main() -> None:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    run(
        os.environ["RELAY_DATABASE_URL"],
        int(os.environ.get("RELAY_BATCH_SIZE", "100")),
        stop,
        float(os.environ.get("RELAY_TICK_SECONDS", "1")),
    )


if __name__ == "__main__":
    main()
