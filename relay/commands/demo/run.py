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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

import kombu
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.celery import create_app
from relay.celery.names import TICK
from relay.commands.demo.report import Ledger, Outcome, Progress, judge, summarize
from relay.config import Settings
from relay.config.urls import redact
from relay.exceptions import ConfigError
from relay.store.operations.store import OperationsStore
from relay.store.schema import upgrade

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


def run(options: DemoOptions, *, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> Outcome:
    """Run the demo and print its progress (``err``) and summary (``out``)."""
    if options.events < 1 or not 0 <= options.rollback_ratio < 1 or options.producers < 1:
        raise ConfigError("relay demo: --events >= 1, 0 <= --rollback-ratio < 1, --producers >= 1")
    with _database(options.database_url) as url:
        settings = Settings(
            database_url=url, broker_url=EVENTS_URL, exchange=EXCHANGE, tick_seconds=0.5
        )
        upgrade.upgrade(url)
        store = OperationsStore.from_url(url)
        try:
            _refuse_unfinished_rows(store, url)
            orders.create(store.engine, checkfirst=True)
            outcome = _relay_and_check(options, settings, store, err)
            if options.database_url is not None:
                orders.drop(store.engine)
        finally:
            store.dispose()
    summarize(outcome, _route(options, settings), out)
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


def _refuse_unfinished_rows(store: OperationsStore, url: str) -> None:
    counts = store.status().counts
    if counts.get("pending") or counts.get("processing"):
        raise ConfigError(
            f"relay demo: {redact(url)} has unfinished outbox rows; the demo would relay them "
            "into its in-memory exchange. Use an empty outbox (or no --database-url)."
        )


def _relay_and_check(
    options: DemoOptions, settings: Settings, store: OperationsStore, err: TextIO
) -> Outcome:
    ledger = Ledger()
    stop = threading.Event()
    app = create_app(settings)
    # The worker's tracer looks tasks up on the current app; make it this one (the relay's
    # tasks are registered on their own app only).
    app.set_current()
    app.set_default()
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
        progress = Progress(options.events, err)
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
    return judge(ledger, time.monotonic() - started)


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


def _settled(store: OperationsStore, consumer: _Consumer) -> bool:
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


def _route(options: DemoOptions, settings: Settings) -> str:
    database = "a throw-away SQLite file"
    if options.database_url is not None:
        database = redact(settings.database_url)
    return (
        f"{database} -> Celery worker (in-process) -> {EVENTS_URL} "
        f"exchange {settings.exchange!r} -> consumer"
    )
