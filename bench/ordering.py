"""Per-key ordering: what keys cost the relay and what the fence costs producers, on PostgreSQL
and MariaDB.

- **Drain**: N events over 1, 10 and 100 keys against the same events without keys, 4
  ``relay dispatch --loop`` processes at the default batch sizes (``RELAY_BATCH_SIZE`` 100
  growing to ``RELAY_BATCH_MAX`` 1,000; runs before 2026-12-07 fixed the batch at 100), in the
  same run, the cases interleaved. The events commit at once (numbered as ``relay.enqueue``
  numbers them) and the drain clock of :mod:`bench.timing` times them. Nobody consumes the
  queue meanwhile (a consumer on 2 cores costs as much CPU as the relays); its depth is
  checked afterwards. With ``--baseline REV`` the relay of git revision REV drains the same
  cases on a database its own migrations made, the revisions taking turns with the checkout.
- **Producer**: enqueue transactions per second (one event, then commit) without a key, with a
  key drawn from 100 and with one shared key, from 1 and 4 producer processes starting together.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from bench import procs, rows, services
from bench.timing import Workload, drain_once
from relay.store.engine import create_engine
from relay.store.schema.tables import outbox, outbox_progress, outbox_sequence

BACKENDS = ("postgresql", "mariadb")
KEYS = [0, 1, 10, 100]  # 0: without keys
DISPATCHERS = 4
#: ``RELAY_BATCH_SIZE`` of the drain; None: the relay's defaults.
BATCH: int | None = None
PRODUCERS = [1, 4]
PRODUCER_MODES = ("unkeyed", "100 keys", "one key")


def _keyed_inserter(keys: int) -> Any:
    def insert(engine: sa.Engine, count: int) -> None:
        """``count`` events in one transaction, numbered per key the way ``relay.enqueue``
        numbers them (the documented plain-SQL path), over ``keys`` keys round-robin."""
        payload = {"order": 1, "sku": "ABC-123", "qty": 2, "note": "x" * 120}
        events: list[dict[str, Any]] = []
        for i in range(count):
            row: dict[str, Any] = {"event_type": "bench.ordering", "payload": payload}
            if keys:
                row.update(ordering_key=f"key-{i % keys}", seq=i // keys + 1)
            events.append(row)
        with engine.begin() as conn:
            if keys:
                last = {f"key-{k}": (count - k + keys - 1) // keys for k in range(keys)}
                conn.execute(
                    sa.insert(outbox_sequence),
                    [{"ordering_key": k, "last_seq": n} for k, n in last.items()],
                )
                conn.execute(
                    sa.insert(outbox_progress), [{"ordering_key": k, "sent_seq": 0} for k in last]
                )
            for start in range(0, count, 2_000):
                conn.execute(sa.insert(outbox), events[start : start + 2_000])

    return insert


@dataclass(frozen=True)
class Mode:
    """A relay that drains: the checkout's (``source`` None) or a revision's source tree."""

    name: str
    url: str
    source: str | None = None


def _drain_mode(mode: Mode, count: int) -> tuple[dict[int, float], dict[int, int]]:
    """One round of every case, by number of keys, on one fleet of ``mode``'s relay."""
    engine = create_engine(mode.url)
    rates: dict[int, float] = {}
    delivered: dict[int, int] = {}
    extra = {} if mode.source is None else {"PYTHONPATH": mode.source}
    try:
        with services.route(services.AMQP_URL, "ordering") as route:
            work = Workload(
                procs.relay_command(), procs.RELAY_READY, DISPATCHERS, BATCH, mode.url, route, extra
            )
            with procs.workers(work.argv, work.env(), DISPATCHERS, ready=work.ready) as running:
                drain_once(engine, 200, running)  # connect and warm up outside the clock
                route.purge()
                for keys in KEYS:  # interleaved, so drift in the machine hits every case
                    rows.clear(engine)
                    insert = _keyed_inserter(keys)
                    rates[keys] = drain_once(engine, count, running, insert=insert)["rate"]
                    delivered[keys] = route.purge()
            rows.clear(engine)
    finally:
        engine.dispose()
    return rates, delivered


def drain_rates(modes: list[Mode], reps: int, count: int) -> dict[str, dict[str, Any]]:
    """Events/s per number of keys (``"0"``: without keys), per mode: ``reps`` rounds, the
    modes taking turns (each round starts with another)."""
    rates: dict[str, dict[int, list[float]]] = {m.name: {k: [] for k in KEYS} for m in modes}
    delivered: dict[str, dict[int, list[int]]] = {m.name: {k: [] for k in KEYS} for m in modes}
    for rep in range(reps):
        for mode in modes[rep % len(modes) :] + modes[: rep % len(modes)]:
            got, queued = _drain_mode(mode, count)
            for keys in KEYS:
                rates[mode.name][keys].append(got[keys])
                delivered[mode.name][keys].append(queued[keys])
    out: dict[str, dict[str, Any]] = {}
    for mode in modes:
        base = statistics.median(rates[mode.name][0])
        out[mode.name] = {}
        for keys in KEYS:
            med = statistics.median(rates[mode.name][keys])
            out[mode.name][str(keys)] = {
                "median": round(med),
                "runs": [round(r) for r in rates[mode.name][keys]],
                "vs_unkeyed": round(med / base, 2),
                "delivered": delivered[mode.name][keys],
            }
    return out


def _produce(url: str, mode: str, seconds: float, ready: Any, out: Any) -> None:
    engine = create_engine(url, pool_size=1)
    with engine.connect() as conn:  # connect before the clock starts
        conn.execute(sa.text("SELECT 1"))
    ready.wait()  # every producer starts together
    n = 0
    end = time.perf_counter() + seconds
    try:
        while time.perf_counter() < end:
            key = None if mode == "unkeyed" else "hot" if mode == "one key" else f"k{n % 100}"
            for _ in range(5):
                try:
                    with Session(engine) as session, session.begin():
                        relay.enqueue(session, "bench.produce", {"n": n}, ordering_key=key)
                    break
                except sa.exc.OperationalError as exc:  # a MySQL deadlock victim: retry
                    if "deadlock" not in str(exc.orig).lower():
                        raise
            n += 1
    finally:
        engine.dispose()
    out.put(n)


def producer_rates(url: str, seconds: float, rounds: int) -> dict[str, Any]:
    """Enqueue transactions/s per mode and number of producer processes: the median of
    ``rounds`` rounds, the modes taking turns within each round."""
    ctx = multiprocessing.get_context("spawn")
    engine = create_engine(url)
    rates: dict[str, list[float]] = {}
    try:
        for _ in range(rounds):
            for producers in PRODUCERS:
                for mode in PRODUCER_MODES:
                    rows.clear(engine)
                    queue, ready = ctx.Queue(), ctx.Barrier(producers + 1, timeout=120)
                    started = [
                        ctx.Process(target=_produce, args=(url, mode, seconds, ready, queue))
                        for _ in range(producers)
                    ]
                    for p in started:
                        p.start()
                    ready.wait()
                    total = sum(queue.get(timeout=seconds + 120) for _ in started)
                    for p in started:
                        p.join(timeout=30)
                    rates.setdefault(f"p{producers} {mode}", []).append(total / seconds)
    finally:
        rows.clear(engine)
        engine.dispose()
    return {name: round(statistics.median(r)) for name, r in rates.items()}


def run(
    count: int, reps: int, producer_seconds: float, baselines: Sequence[str] = ()
) -> dict[str, Any]:
    """The ``ordering`` section: both backends, drain (beside the relays of ``baselines``,
    git revisions) and producers."""
    data: dict[str, Any] = {"events": count, "dispatchers": DISPATCHERS, "batch": BATCH}
    data.update(rounds=reps, producer_seconds=producer_seconds, baselines=list(baselines))
    for backend in BACKENDS:
        with contextlib.ExitStack() as stack:
            url = stack.enter_context(services.database("ordering", backend))
            modes = [Mode("relay", url)]
            for rev in baselines:
                source = stack.enter_context(services.source_of(rev))
                own = stack.enter_context(services.database("ordering", backend, source=source))
                modes.append(Mode(f"relay@{rev}", own, source))
            drains = drain_rates(modes, reps, count)
            data[backend] = {
                "drain": drains.pop("relay"),
                "baselines": drains,
                "producer": producer_rates(url, producer_seconds, reps),
            }
    return data
