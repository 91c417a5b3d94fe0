"""What the relay is measured against: what the broker and the database allow on their own
(the ceilings), and the naive relay people write first.

- **Broker**: the relay's messages (same body, headers, persistent, mandatory) published with
  raw Kombu / py-amqp and publisher confirms awaited per window of 100, 1,000 or all messages,
  or one by one; built before the clock starts, so only the transport is timed.
- **Database**: the relay's own ``DispatchStore.claim`` + ``DispatchStore.complete(sent=...)`` in a
  loop with no broker (two commits per batch, exactly the relay's database work), timed by the drain
  clock like the relay itself, on PostgreSQL, MariaDB and SQLite.
- **The naive relay** (a baseline, not the product): one row per transaction. SELECT one pending
  row FOR UPDATE SKIP LOCKED, publish it and wait for its confirm, mark it sent, commit; the row
  lock and the transaction stay open across the broker round trip.

``python -m bench.baselines sql|naive`` is a worker of the last two (``RELAY_*`` settings from
the environment), looping until SIGTERM.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

import amqp
import kombu
import sqlalchemy as sa

from bench import procs, rows, services
from bench.timing import Workload, grid, measure, summarize
from relay.config import Settings
from relay.config.urls import normalize_url
from relay.dispatch.dispatcher import make_worker_id
from relay.publishers import message
from relay.publishers.kombu_connection import kombu_message
from relay.publishers.message import OutgoingMessage
from relay.records import ClaimedEvent
from relay.store.dispatch_path.store import DispatchStore
from relay.store.engine import create_engine


class _Confirms:
    """Counts publisher confirms on a channel (acks arrive in order, often ``multiple``)."""

    def __init__(self) -> None:
        self.floor = 0
        self.singles: set[int] = set()
        self.nacked = 0

    def on_ack(self, tag: int, multiple: bool) -> None:
        if multiple:
            self.floor = max(self.floor, tag)
            self.singles = {t for t in self.singles if t > self.floor}
        elif tag > self.floor:
            self.singles.add(tag)

    def on_nack(self, tag: int, multiple: bool) -> None:
        self.nacked += 1
        self.on_ack(tag, multiple)

    @property
    def confirmed(self) -> int:
        return self.floor + len(self.singles)

    def listen(self, channel: Any) -> None:
        channel.confirm_select()
        channel.events["basic_ack"].add(self.on_ack)
        channel.events["basic_nack"].add(self.on_nack)


def _windowed(
    publish: Callable[[OutgoingMessage], None],
    drain: Callable[[], None],
    confirms: _Confirms,
    msgs: list[OutgoingMessage],
    window: int,
) -> float:
    start = time.perf_counter()
    sent = 0
    for i in range(0, len(msgs), window):
        for msg in msgs[i : i + window]:
            publish(msg)
        sent += len(msgs[i : i + window])
        while confirms.confirmed < sent:
            drain()
    elapsed = time.perf_counter() - start
    if confirms.nacked:
        raise RuntimeError(f"broker nacked {confirms.nacked} messages")
    return len(msgs) / elapsed


def kombu_windowed(
    route: services.Route,
    msgs: list[OutgoingMessage],
    window: int,
    before_clock: Callable[[], None] | None = None,
) -> float:
    """Kombu channel in confirm mode, the relay's former publisher calls; msgs/s.
    ``before_clock`` runs once the channel is ready, before the clock starts."""
    with kombu.Connection(route.url) as conn:
        channel: Any = conn.channel()
        confirms = _Confirms()
        confirms.listen(channel)

        def publish(msg: OutgoingMessage) -> None:
            channel.basic_publish(
                kombu_message(channel, msg),
                exchange=route.exchange_name,
                routing_key=msg.routing_key,
                mandatory=True,
            )

        if before_clock is not None:
            before_clock()
        return _windowed(publish, lambda: conn.drain_events(timeout=10), confirms, msgs, window)


def pyamqp_windowed(route: services.Route, msgs: list[OutgoingMessage], window: int) -> float:
    """Plain py-amqp (no Kombu layer) in confirm mode; msgs/s."""
    parts = urlsplit(route.url)
    conn = amqp.Connection(
        host=f"{parts.hostname}:{parts.port or 5672}",
        userid=unquote(parts.username or "guest"),
        password=unquote(parts.password or "guest"),
    )
    conn.connect()
    try:
        channel: Any = conn.channel()
        confirms = _Confirms()
        confirms.listen(channel)

        def publish(msg: OutgoingMessage) -> None:
            channel.basic_publish(
                amqp.Message(
                    msg.body,
                    content_type=message.CONTENT_TYPE,
                    content_encoding=message.CONTENT_ENCODING,
                    application_headers=msg.headers,
                    delivery_mode=message.PERSISTENT,
                    message_id=msg.message_id,
                ),
                exchange=route.exchange_name,
                routing_key=msg.routing_key,
                mandatory=True,
            )

        return _windowed(publish, lambda: conn.drain_events(timeout=10), confirms, msgs, window)
    finally:
        conn.close()


def kombu_producer(route: services.Route, msgs: list[OutgoingMessage], confirm: bool) -> float:
    """``kombu.Producer.publish`` one message at a time (``confirm_publish`` waits for each
    ack on AMQP; Redis has no confirms); msgs/s. The exchange is declared on this connection:
    Kombu's virtual transports only route by the type of an exchange they declared."""
    options = {"confirm_publish": True} if confirm else {}
    exchange = kombu.Exchange(route.exchange_name, type="topic", durable=True)
    with kombu.Connection(route.url, transport_options=options) as conn:
        producer = kombu.Producer(conn.default_channel, exchange=exchange)
        start = time.perf_counter()
        for msg in msgs:
            producer.publish(
                msg.body, routing_key=msg.routing_key, retry=False, **message.properties(msg)
            )
        return len(msgs) / (time.perf_counter() - start)


def _repeat(
    route: services.Route, reps: int, count: int, publish: Callable[[], float]
) -> dict[str, Any]:
    rates: list[float] = []
    delivered: list[int] = []
    for _ in range(reps):
        route.purge()
        rates.append(publish())
        delivered.append(route.depth())
    route.purge()
    result = summarize(rates)
    result.update(messages=count, delivered=delivered)
    return result


def publish_ceilings(count: int, reps: int, windows: list[int]) -> dict[str, Any]:
    """Every broker-only publishing mode, ``reps`` times each; msgs/s."""
    msgs = [message.build(rows.claimed(n)) for n in range(1, count + 1)]
    few = msgs[: max(100, count // 5)]
    out: dict[str, Any] = {}
    with services.route(services.AMQP_URL, "ceiling") as route:
        kombu_windowed(route, msgs[:200], 100)  # warm the connection path and the queue
        for window in windows:
            w = window or count
            label = "all" if window == 0 else str(window)
            out[f"kombu_confirm_window_{label}"] = _repeat(
                route, reps, count, functools.partial(kombu_windowed, route, msgs, w)
            )
        out["pyamqp_confirm_window_1000"] = _repeat(
            route, reps, count, lambda: pyamqp_windowed(route, msgs, 1000)
        )
        out["kombu_confirm_each"] = _repeat(
            route, reps, len(few), lambda: kombu_producer(route, few, confirm=True)
        )
    with services.route(services.REDIS_URL, "ceiling") as route:
        out["redis_kombu_publish_each"] = _repeat(
            route, reps, len(few), lambda: kombu_producer(route, few, confirm=False)
        )
    return out


def sql_ceiling(
    count: int, reps: int, grids: dict[str, tuple[list[int], list[int]]]
) -> dict[str, Any]:
    """Claim + mark sent with no broker, per database and (processes, batch size) in
    ``grids`` (``{"postgresql": ([1, 2, 4], [10, 100, 500]), ...}``); rows/s."""
    out: dict[str, Any] = {}
    with services.route(services.AMQP_URL, "sql") as route:
        for kind, (processes, batches) in grids.items():
            with services.database("sql", kind) as url:
                argv = procs.module_command("bench.baselines", "sql")
                out[kind] = grid(
                    argv,
                    procs.BENCH_READY,
                    url,
                    route,
                    count,
                    reps,
                    processes,
                    batches,
                    check_queue=False,
                )
    return out


def naive(count: int, reps: int, processes: list[int]) -> dict[str, Any]:
    """The naive relay in 1/2/4 processes on PostgreSQL + RabbitMQ; rows/s."""
    out: dict[str, Any] = {}
    with (
        services.database("naive") as url,
        services.route(services.AMQP_URL, "naive") as route,
    ):
        for n in processes:
            argv = procs.module_command("bench.baselines", "naive")
            work = Workload(argv, procs.BENCH_READY, n, 1, url, route)
            out[f"p{n}"] = measure(work, count, reps)
    return out


def sql_worker(stop: threading.Event) -> None:
    """Claim and mark sent until ``stop`` is set."""
    batch_size = int(os.environ.get("RELAY_BATCH_SIZE", "100"))
    idle = float(os.environ.get("RELAY_TICK_SECONDS", "1"))
    # The byte bound as the relay runs it (RELAY_BATCH_MAX_BYTES or its default).
    max_bytes = os.environ.get("RELAY_BATCH_MAX_BYTES")
    store = DispatchStore(
        create_engine(os.environ["RELAY_DATABASE_URL"]),
        batch_max_bytes=int(max_bytes) if max_bytes else Settings().batch_max_bytes,
    )
    worker = make_worker_id()
    print(procs.BENCH_READY, file=sys.stderr, flush=True)
    try:
        while not stop.is_set():
            events = store.claim(worker, batch_size, 30.0)
            if events:
                store.complete(worker, sent=events)
            if len(events) < batch_size:
                stop.wait(idle)
    finally:
        store.dispose()


_PICK_ONE = sa.text(
    "SELECT id, event_type, payload, headers, ordering_key, attempt, created_at FROM outbox "
    "WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
)
_MARK_SENT = sa.text(
    "UPDATE outbox SET status = 'sent', attempt = attempt + 1, sent_at = now(), "
    "updated_at = now() WHERE id = :id"
)


def naive_worker(stop: threading.Event) -> None:
    """Relay rows one transaction at a time until ``stop`` is set."""
    engine = sa.create_engine(normalize_url(os.environ["RELAY_DATABASE_URL"]))
    exchange = kombu.Exchange(os.environ["RELAY_EXCHANGE"], type="topic", durable=True)
    idle = float(os.environ.get("RELAY_TICK_SECONDS", "1"))
    events_url = os.environ["RELAY_EVENTS_URL"]
    with kombu.Connection(events_url, transport_options={"confirm_publish": True}) as conn:
        producer = kombu.Producer(conn.default_channel, exchange=exchange)
        print(procs.BENCH_READY, file=sys.stderr, flush=True)
        while not stop.is_set():
            with engine.begin() as db:
                row = db.execute(_PICK_ONE).mappings().first()
                if row is not None:
                    event = ClaimedEvent(
                        row["id"],
                        row["event_type"],
                        row["payload"],
                        row["headers"],
                        row["ordering_key"],
                        row["attempt"] + 1,
                        row["created_at"],
                    )
                    msg = message.build(event)
                    producer.publish(
                        msg.body,
                        routing_key=msg.routing_key,
                        mandatory=True,
                        retry=False,
                        **message.properties(msg),
                    )
                    db.execute(_MARK_SENT, {"id": event.id})
            if row is None:
                stop.wait(idle)
    engine.dispose()


if __name__ == "__main__":
    {"sql": sql_worker, "naive": naive_worker}[sys.argv[1]](procs.until_signalled())
