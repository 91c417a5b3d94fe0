"""Consumer throughput: events/s through a handler that writes one row, with the inbox claim
in its transaction and without, side by side in one run (PostgreSQL + RabbitMQ).

Both sides run the same ``relay.consumer`` path (decode, one transaction per event, ack after
commit, prefetch 16) on one process; "without" only skips the inbox INSERT. The queue is filled
before the clock starts, so only consumption is timed; medians of ``--repeat`` runs each.

    python -m bench.consumer [--events 5000] [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from typing import Any

import kombu
import sqlalchemy as sa

from bench import fixtures, services
from bench.stats import ratio, summarize
from relay.consumer import Event, EventConsumer, Handler, QueueHandlers
from relay.engine import create_engine

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


def measure(engine: sa.Engine, inbox: bool, events: int) -> float:
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


def section(plan: Any) -> dict[str, Any]:
    """The ``consumer`` section of ``python -m bench``."""
    quick = getattr(plan, "name", "") == "quick"
    return run(500, 1) if quick else run()


def render(data: dict[str, Any]) -> str:
    """The report's section on consumer throughput (Markdown)."""
    a, b = data["with_inbox_per_s"], data["without_inbox_per_s"]
    return "\n".join(
        [
            "## Event handlers with and without the inbox (`bench/consumer.py`)",
            "",
            f"{data['events']:,} events prefilled in a RabbitMQ queue, consumed by one"
            " `relay.consumer.EventConsumer` (prefetch 16) whose handler writes one row on"
            " PostgreSQL, one transaction per event; the two sides interleaved in one run,"
            f" medians of {len(a['runs'])}. Load average at the end: {data['loadavg']}.",
            "",
            "| handler transaction | events/s | runs |",
            "| --- | --- | --- |",
            f"| row + inbox claim | {a['median']:,.0f} | {_runs(a)} |",
            f"| row only | {b['median']:,.0f} | {_runs(b)} |",
            "",
            f"The inbox costs one INSERT per event in the same transaction: {data['ratio']:.2f}x"
            " of the rate without it. Command: `python -m bench --only consumer`.",
            "",
        ]
    )


def _runs(summary: dict[str, Any]) -> str:
    return ", ".join(f"{r:,.0f}" for r in summary["runs"])


def run(events: int = 5000, repeat: int = 3) -> dict[str, Any]:
    with fixtures.database("consumer") as url:
        engine = create_engine(url)
        metadata.create_all(engine)
        try:
            with_inbox, without = [], []
            for _ in range(repeat):  # interleaved, so load drifts hit both sides alike
                without.append(measure(engine, False, events))
                with_inbox.append(measure(engine, True, events))
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    events, repeat = (500, 1) if args.quick else (args.events, args.repeat)
    print(json.dumps(run(events, repeat), indent=2))
