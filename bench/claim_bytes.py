"""``python -m bench.claim_bytes``: what bounding claims by bytes (``RELAY_BATCH_MAX_BYTES``)
costs the normal path, old claim against new, interleaved in one process.

The same ``DispatchStore.claim`` + ``DispatchStore.complete(sent=...)`` as ``sql_ceiling``, on the
bench's ~200-byte rows, alternating batch by batch the claim bounded by rows only
(``batch_max_bytes`` None: the statement of the relay before the bound) and the claim bounded by
bytes at the default 16 MiB, over one database and one process, so a shared machine's load falls on
both alike. Prints, per database and batch size, each side's rows/s at its median batch time and
their ratio (new / old), with the same ratio over each half of the run as a check of its stability.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench import rows, services
from relay.config import Settings
from relay.store.dispatch_path.store import DispatchStore
from relay.store.engine import create_engine


def _batch(store: DispatchStore, batch: int) -> float:
    """Claim and mark sent one batch of ``batch`` rows; seconds."""
    started = time.perf_counter()
    events = store.claim("bench", batch, 30.0)
    store.complete("bench", sent=events)
    took = time.perf_counter() - started
    assert len(events) == batch, f"the table ran out: {len(events)}"
    return took


def run(kind: str, batch: int, pairs: int) -> dict[str, Any]:
    """Old and new claims alternated batch by batch, ``pairs`` of each, on a new ``kind``
    database; each side's median rows/s and the ratio of the medians."""
    with services.database("claim_bytes", kind) as url:
        engine = create_engine(url)
        try:
            rows.insert_pending(engine, (2 * pairs + 4) * batch)
            sides = {
                "old": DispatchStore(engine),
                "new": DispatchStore(engine, batch_max_bytes=Settings().batch_max_bytes),
            }
            for store in sides.values():  # warm up both statement caches and the pool
                _batch(store, batch)
            took: dict[str, list[float]] = {"old": [], "new": []}
            for i in range(pairs):
                order = ("old", "new") if i % 2 == 0 else ("new", "old")
                for side in order:
                    took[side].append(_batch(sides[side], batch))
        finally:
            engine.dispose()
    old, new = (batch / statistics.median(took[side]) for side in ("old", "new"))
    # The same ratio over each half of the run: how far it moves with the machine's load.
    halves = [
        statistics.median(took["old"][part]) / statistics.median(took["new"][part])
        for part in (slice(0, pairs // 2), slice(pairs // 2, pairs))
    ]
    return {"old": old, "new": new, "ratio": new / old, "halves": halves}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--databases", nargs="+", default=["postgresql", "mariadb", "sqlite"])
    p.add_argument("--batches", nargs="+", type=int, default=[100, 1000])
    p.add_argument("--pairs", type=int, default=200, help="batches of each side, alternated")
    a = p.parse_args()
    print(f"load average {services.loadavg()}, revision {services.git_revision()}")
    print("| database | batch | old rows/s | new rows/s | new / old (first half, second half) |")
    print("| --- | --- | --- | --- | --- |")
    for kind in a.databases:
        for batch in a.batches:
            r = run(kind, batch, a.pairs if batch < 1000 else max(20, a.pairs // 5))
            first, second = r["halves"]
            print(
                f"| {kind} | {batch} | {r['old']:,.0f} | {r['new']:,.0f} | "
                f"{r['ratio']:.2f}x ({first:.2f}, {second:.2f}) |",
                flush=True,
            )
    print(f"load average {services.loadavg()}")


if __name__ == "__main__":
    main()
