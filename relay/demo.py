"""``relay demo``: the whole path on the embedded default, in one process, checked end to end.

Business transactions write an order and its events to SQLite, and some roll back. The relay's
own Celery app (:mod:`relay.celery`) runs in a worker thread of this process and relays the
events, woken after each commit and ticked like beat would, to a Kombu topic exchange on the
``memory://`` transport. A consumer thread bound to that exchange checks that exactly the
committed events arrive, each once.

``memory://`` needs no server but exists only inside one process, which is why the producers,
the Celery worker and the consumer all run here. The database is a throw-away SQLite file
unless ``--database-url`` names another one.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

import kombu
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay import migrate
from relay.celery import TICK, create_app
from relay.config import Settings
from relay.exceptions import ConfigError
from relay.store import Store
from relay.urls import redact

#: In-process Kombu transport; the explicit host spares a warning per connection.
EVENTS_URL = "memory://localhost/"
EXCHANGE = "relay.demo"
#: The business table the simulated transactions write beside their events.
orders = sa.Table(
    "relay_demo_orders",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("amount_cents", sa.Integer, nullable=False),
)


class _Rollback(Exception):
    """Raised inside a simulated business transaction to abandon it."""


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """What ``relay demo`` runs."""

    events: int = 3000
    database_url: str | None = None
    rollback_ratio: float = 0.1
    producers: int = 2
    timeout_seconds: float = 120.0
    seed: int | None = None


@dataclass
class Ledger:
    """What the producers committed and what the consumer received, with monotonic times."""

    committed: dict[str, float] = field(default_factory=dict)
    rolled_back: set[str] = field(default_factory=set)
    transactions: Counter[str] = field(default_factory=Counter)
    received: list[tuple[str, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True, slots=True)
class Outcome:
    """The demo's verdict."""

    committed: int
    delivered: int
    duplicates: int
    lost: int
    phantoms: int
    elapsed_seconds: float
    latencies_ms: list[float]
    transactions_committed: int = 0
    transactions_rolled_back: int = 0
    events_rolled_back: int = 0

    @property
    def ok(self) -> bool:
        return self.committed > 0 and not (self.lost or self.duplicates or self.phantoms)


def run(options: DemoOptions, *, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> Outcome:
    """Run the demo and print its progress (``err``) and summary (``out``)."""
    if options.events < 1 or not 0 <= options.rollback_ratio < 1 or options.producers < 1:
        raise ConfigError("relay demo: --events >= 1, 0 <= --rollback-ratio < 1, --producers >= 1")
    with _database(options.database_url) as url:
        settings = Settings(
            database_url=url, broker_url=EVENTS_URL, exchange=EXCHANGE, tick_seconds=0.5
        )
        migrate.upgrade(url)
        store = Store.from_url(url)
        try:
            _refuse_unfinished_rows(store, url)
            orders.create(store.engine, checkfirst=True)
            outcome = _relay_and_check(options, settings, store, err)
            if options.database_url is not None:
                orders.drop(store.engine)
        finally:
            store.dispose()
    _summarize(options, settings, outcome, out)
    return outcome


@contextmanager
def _database(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    root = tempfile.mkdtemp(prefix="relay-demo-")
    try:
        yield f"sqlite:///{root}/relay-demo.sqlite3"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _refuse_unfinished_rows(store: Store, url: str) -> None:
    counts = store.status().counts
    if counts.get("pending") or counts.get("processing"):
        raise ConfigError(
            f"relay demo: {redact(url)} has unfinished outbox rows; the demo would relay them "
            "into its in-memory exchange. Use an empty outbox (or no --database-url)."
        )


def _relay_and_check(
    options: DemoOptions, settings: Settings, store: Store, err: TextIO
) -> Outcome:
    ledger = Ledger()
    stop = threading.Event()
    app = create_app(settings)
    # The in-memory transport polls; its default second would dominate the latency.
    app.conf.broker_transport_options = {"polling_interval": 0.01}
    consumer = _Consumer(settings, ledger, stop)  # binds before the first event is relayed
    rng = random.Random(options.seed)
    quotas = [options.events // options.producers] * options.producers
    quotas[0] += options.events - sum(quotas)
    producers = [
        threading.Thread(
            target=_produce,
            args=(store.engine, quota, options.rollback_ratio, random.Random(rng.random()), ledger),
            name=f"demo-producer-{i}",
            daemon=True,
        )
        for i, quota in enumerate(quotas)
    ]
    started = time.monotonic()
    with _worker(app):
        consumer.start()
        for p in producers:
            p.start()
        deadline = started + options.timeout_seconds
        progress = _Progress(options.events, err)
        next_tick = 0.0
        while time.monotonic() < deadline:
            now = time.monotonic()
            if now >= next_tick:  # what beat does: the safety net behind the wake-ups
                app.send_task(TICK, queue=settings.queue, expires=settings.tick_seconds)
                next_tick = now + settings.tick_seconds
            with ledger.lock:
                delivered = len({e for e, _ in ledger.received})
                committed = len(ledger.committed)
            progress.show(committed, delivered)
            producing = any(p.is_alive() for p in producers)
            if not producing and delivered >= committed and _settled(store, consumer):
                break
            stop.wait(0.05)
        progress.done()
        stop.set()
    for p in producers:
        p.join()  # each stops after its quota, so the ledger is final before it is judged
    consumer.join()
    return _outcome(ledger, time.monotonic() - started)


@contextmanager
def _worker(app: Any) -> Iterator[None]:
    """A real Celery worker (solo pool) consuming the relay's queue in a thread of ours."""
    worker = app.WorkController(
        pool="solo",
        concurrency=1,
        loglevel="WARNING",
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
    )
    thread = threading.Thread(target=worker.start, name="demo-celery-worker", daemon=True)
    thread.start()
    try:
        yield
    finally:
        worker.stop(in_sighandler=False)
        thread.join(timeout=30)


def _produce(
    engine: sa.Engine, quota: int, rollback_ratio: float, rng: random.Random, ledger: Ledger
) -> None:
    """Commit business transactions carrying ``quota`` events in all; abandon some others."""
    written = 0
    while written < quota:
        abandon = rng.random() < rollback_ratio
        ids = [uuid.uuid4().hex for _ in range(min(rng.randint(1, 3), quota - written))]
        try:
            with Session(engine) as session, session.begin():
                session.execute(sa.insert(orders).values(amount_cents=rng.randint(100, 99_999)))
                for event_id in ids:
                    payload = {"event": event_id, "sku": rng.choice(["tea", "cup", "pot"])}
                    relay.enqueue(session, "order.created", payload, headers={"demo": True})
                if abandon:
                    raise _Rollback
        except _Rollback:
            with ledger.lock:
                ledger.rolled_back.update(ids)
                ledger.transactions["rolled back"] += 1
            continue
        committed_at = time.monotonic()
        with ledger.lock:
            ledger.committed.update(dict.fromkeys(ids, committed_at))
            ledger.transactions["committed"] += 1
        written += len(ids)


def _settled(store: Store, consumer: _Consumer) -> bool:
    """Nothing left to relay and nothing left to consume: no duplicate can still arrive."""
    counts = store.status().counts
    return not counts.get("pending") and not counts.get("processing") and consumer.idle()


class _Consumer(threading.Thread):
    """A queue bound with ``#`` to the demo exchange, drained into the ledger."""

    def __init__(self, settings: Settings, ledger: Ledger, stop: threading.Event) -> None:
        super().__init__(name="demo-consumer", daemon=True)
        self.ledger, self.stop = ledger, stop
        self.conn = kombu.Connection(settings.events_connection_url)
        exchange = kombu.Exchange(settings.exchange, type="topic", durable=True)
        self.queue = kombu.Queue("relay.demo.consumer", exchange, routing_key="#")
        self.bound = self.queue(self.conn.channel())
        self.bound.declare()
        self._idle = threading.Event()

    def idle(self) -> bool:
        return self._idle.is_set()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                message = self.bound.get(no_ack=True)
                if message is None:
                    self._idle.set()
                    self.stop.wait(0.005)
                    continue
                self._idle.clear()
                event_id = message.decode()["event"]
                with self.ledger.lock:
                    self.ledger.received.append((event_id, time.monotonic()))
        finally:
            self.conn.release()


def _outcome(ledger: Ledger, elapsed: float) -> Outcome:
    with ledger.lock:
        counts = Counter(e for e, _ in ledger.received)
        first_seen: dict[str, float] = {}
        for event_id, at in ledger.received:
            first_seen.setdefault(event_id, at)
        committed = ledger.committed
        latencies = sorted(
            (first_seen[e] - t) * 1000 for e, t in committed.items() if e in first_seen
        )
        return Outcome(
            committed=len(committed),
            delivered=sum(1 for e in counts if e in committed),
            duplicates=sum(n - 1 for n in counts.values()),
            lost=sum(1 for e in committed if e not in counts),
            phantoms=sum(1 for e in counts if e not in committed),
            elapsed_seconds=elapsed,
            latencies_ms=latencies,
            transactions_committed=ledger.transactions["committed"],
            transactions_rolled_back=ledger.transactions["rolled back"],
            events_rolled_back=len(ledger.rolled_back),
        )


class _Progress:
    """One self-rewriting line on a terminal; a line per quarter otherwise."""

    WIDTH = 30

    def __init__(self, total: int, err: TextIO) -> None:
        self.total, self.err = total, err
        self.tty = err.isatty()
        self._quarters = 0

    def show(self, committed: int, delivered: int) -> None:
        share = min(delivered / self.total, 1.0)
        if self.tty:
            bar = "#" * round(share * self.WIDTH)
            self.err.write(
                f"\r[{bar:<{self.WIDTH}}] {delivered:>7}/{self.total} delivered, "
                f"{committed:>7} committed"
            )
            self.err.flush()
        elif share * 4 >= self._quarters + 1:
            self._quarters = int(share * 4)
            self.err.write(f"relay demo: {delivered}/{self.total} delivered\n")

    def done(self) -> None:
        if self.tty:
            self.err.write("\n")


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _summarize(options: DemoOptions, settings: Settings, o: Outcome, out: TextIO) -> None:
    database = (
        "a throw-away SQLite file"
        if options.database_url is None
        else redact(settings.database_url)
    )
    lat = o.latencies_ms
    rate = o.delivered / o.elapsed_seconds if o.elapsed_seconds > 0 else 0.0
    lines: list[Any] = [
        f"relay demo: {database} -> Celery worker (in-process) -> {EVENTS_URL} "
        f"exchange {settings.exchange!r} -> consumer",
        f"  business    {o.transactions_committed} transactions committed, "
        f"{o.transactions_rolled_back} rolled back with {o.events_rolled_back} events",
        f"  events      committed {o.committed}, delivered {o.delivered}, "
        f"duplicates {o.duplicates}, lost {o.lost}, from rolled-back transactions {o.phantoms}",
        f"  throughput  {rate:,.0f} events/s ({o.delivered} in {o.elapsed_seconds:.2f} s, "
        "first commit to last delivery)",
        f"  latency     p50 {_percentile(lat, 0.5):.1f} ms, p99 {_percentile(lat, 0.99):.1f} ms, "
        f"max {max(lat, default=float('nan')):.1f} ms (commit to consumer)",
        "OK: every committed event delivered exactly once, none from a rollback"
        if o.ok
        else "FAILED: events were lost, duplicated or leaked from a rollback",
    ]
    out.write("\n".join(map(str, lines)) + "\n")
    out.flush()
