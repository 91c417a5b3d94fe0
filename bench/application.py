"""What the application's side of the outbox costs, PostgreSQL + RabbitMQ, one process each.

- **Tasks**: the same N Celery tasks three ways, nobody consuming, every side checked by the
  depth of its queue afterwards: ``app.send_task`` with ``confirm_publish``, one at a time (each
  waits for its confirm); ``relay.celery.send_task`` into the outbox, one committed transaction
  per task (no broker round trip); and ``relay dispatch --once``-style draining in this process
  publishing those rows (batches of ``RELAY_BATCH_SIZE``, confirms per batch).
- **Event handlers**: events/s through a handler that writes one row, with the inbox claim in
  its transaction and without, interleaved in one run. Both sides run the same
  ``relay.consume.consumer`` path (decode, one transaction per event, ack after commit, prefetch
  16); "without" only skips the inbox INSERT. The queue is filled before the clock starts.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import kombu
import sqlalchemy as sa
from celery import Celery

from bench import services
from bench.timing import ratio, summarize
from relay.celery import send_task
from relay.config import Settings
from relay.consume.consumer import Event, EventConsumer, Handler, QueueHandlers
from relay.dispatch.dispatcher import Dispatcher
from relay.store.engine import create_engine

TASK = "bench.noop"


def _app(queue: str, confirm: bool) -> Celery:
    app = Celery("bench-tasks", broker=services.AMQP_URL)
    app.conf.update(
        task_default_queue=queue,
        broker_transport_options={"confirm_publish": True} if confirm else {},
        task_ignore_result=True,
    )
    return app


def _depth(queue: str) -> int:
    with kombu.Connection(services.AMQP_URL) as conn:
        channel: Any = conn.default_channel
        return int(channel.queue_declare(queue, passive=True).message_count)


def direct(tasks: int) -> float:
    """Tasks/s of ``app.send_task`` with publisher confirms, one at a time."""
    queue = f"bench.direct.{uuid.uuid4().hex[:8]}"
    app = _app(queue, confirm=True)
    app.send_task(TASK, (0,))  # connection, channel and queue declared before the clock
    start = time.perf_counter()
    for n in range(tasks):
        app.send_task(TASK, (n,))
    rate = tasks / (time.perf_counter() - start)
    assert _depth(queue) == tasks + 1, "direct: tasks missing from the queue"
    services.delete_queue(queue)
    app.close()
    return rate


def through_outbox(tasks: int) -> tuple[float, float]:
    """(enqueue tasks/s, relay tasks/s): commit-per-task writes, then one relay draining."""
    queue = f"bench.outbox.{uuid.uuid4().hex[:8]}"
    app = _app(queue, confirm=False)
    with services.database("tasks") as url:
        engine = create_engine(url)
        try:
            start = time.perf_counter()
            for n in range(tasks):
                with engine.begin() as conn:
                    send_task(conn, TASK, (n,), app=app)
            enqueue_rate = tasks / (time.perf_counter() - start)
        finally:
            engine.dispose()
        settings = Settings(database_url=url, broker_url=services.AMQP_URL)
        dispatcher = Dispatcher.from_settings(settings)
        try:
            start = time.perf_counter()
            report = dispatcher.drain(budget_seconds=600)
            relay_rate = report.sent / (time.perf_counter() - start)
        finally:
            dispatcher.close()
            dispatcher.publisher.close()
            dispatcher.store.dispose()
    assert report.sent == tasks, report
    assert _depth(queue) == tasks, "outbox: tasks missing from the queue"
    services.delete_queue(queue)
    app.close()
    return enqueue_rate, relay_rate


def tasks(count: int) -> dict[str, Any]:
    """The ``tasks`` section."""
    direct_rate = direct(count)
    enqueue_rate, relay_rate = through_outbox(count)
    return {
        "tasks": count,
        "direct_send_task_confirmed_per_s": round(direct_rate),
        "outbox_enqueue_per_s": round(enqueue_rate),
        "relay_publish_per_s": round(relay_rate),
        "enqueue_vs_direct": round(ratio(enqueue_rate, direct_rate), 2),
        "relay_vs_direct": round(ratio(relay_rate, direct_rate), 2),
        "loadavg": services.loadavg(),
    }


metadata = sa.MetaData()
effects = sa.Table(
    "bench_effects",
    metadata,
    sa.Column("pk", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("message_id", sa.String(64), nullable=False),
    sa.Column("n", sa.Integer, nullable=False),
)


def write_row(conn: sa.Connection, event: Event) -> None:
    conn.execute(sa.insert(effects).values(message_id=event.id, n=event.payload["n"]))


class WithoutInbox(QueueHandlers):
    """The same handling with the inbox claim left out: the baseline."""

    def _once(self, event: Event, handlers: list[Handler]) -> str:
        with self.engine.begin() as conn:
            for handler in handlers:
                handler(conn, event)
        return "done"


def _fill(url: str, exchange: str, events: int) -> None:
    with kombu.Connection(url) as conn:
        producer = conn.Producer(exchange=kombu.Exchange(exchange, type="topic", durable=True))
        for n in range(events):
            producer.publish(
                {"n": n}, routing_key="order.created", message_id=uuid.uuid4().hex, delivery_mode=2
            )


def consume(engine: sa.Engine, inbox: bool, events: int) -> float:
    """Events/s to consume ``events`` prefilled events through one consumer."""
    url, exchange = services.AMQP_URL, f"bench.consumer.{uuid.uuid4().hex[:8]}"
    kind = QueueHandlers if inbox else WithoutInbox
    handlers = kind(f"{exchange}.q", engine)
    handlers.add("order.*", write_row)
    with kombu.Connection(url) as conn:
        queue = handlers.declare(conn.channel(), exchange)
        _fill(url, exchange, events)
        consumer, stop = EventConsumer(url, exchange, handlers), threading.Event()
        thread = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
        start = time.perf_counter()
        thread.start()
        while consumer.counts.get("done", 0) < events:
            time.sleep(0.005)  # polling the consumer's own counter, not synchronization
        elapsed = time.perf_counter() - start
        stop.set()
        thread.join(10)
        queue(conn.channel()).delete()
        kombu.Queue(f"{handlers.queue}.dead")(conn.channel()).delete()
    return events / elapsed


def consumer(events: int, repeat: int) -> dict[str, Any]:
    """The ``consumer`` section: with and without the inbox, interleaved ``repeat`` times."""
    with services.database("consumer") as url:
        engine = create_engine(url)
        metadata.create_all(engine)
        try:
            with_inbox, without = [], []
            for _ in range(repeat):  # interleaved, so load drifts hit both sides alike
                without.append(consume(engine, False, events))
                with_inbox.append(consume(engine, True, events))
        finally:
            engine.dispose()
    a, b = summarize(with_inbox), summarize(without)
    return {
        "events": events,
        "with_inbox_per_s": a,
        "without_inbox_per_s": b,
        "ratio": round(ratio(a["median"], b["median"]), 3),
        "loadavg": services.loadavg(),
    }
