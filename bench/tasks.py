"""Celery tasks through the outbox against ``app.send_task`` with ``confirm_publish``, one run.

Three rates, the same N tasks each (PostgreSQL + RabbitMQ, nobody consuming; every side is
checked by the depth of its queue afterwards):

- ``direct``: ``app.send_task`` with the broker's ``confirm_publish`` on, one task at a time,
  as an application sends tasks today (each waits for its confirm);
- ``enqueue``: ``relay.celery.send_task`` into the outbox, one committed transaction per task,
  as an application sends tasks through the outbox (no broker round trip);
- ``relay``: ``relay dispatch --once`` in this process publishing those rows (batches of
  ``RELAY_BATCH_SIZE``, confirms per batch).

    python -m bench.tasks [--tasks 2000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any

import kombu
from celery import Celery

from bench import fixtures, services
from bench.stats import ratio
from relay.celery import send_task
from relay.config import Settings
from relay.dispatcher import Dispatcher
from relay.engine import create_engine

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
        return int(conn.default_channel.queue_declare(queue, passive=True).message_count)


def _delete(queue: str) -> None:
    with kombu.Connection(services.AMQP_URL) as conn:
        conn.default_channel.queue_delete(queue)


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
    _delete(queue)
    app.close()
    return rate


def through_outbox(tasks: int) -> tuple[float, float]:
    """(enqueue tasks/s, relay tasks/s): commit-per-task writes, then one relay draining."""
    queue = f"bench.outbox.{uuid.uuid4().hex[:8]}"
    app = _app(queue, confirm=False)
    with fixtures.database("tasks") as url:
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
    _delete(queue)
    app.close()
    return enqueue_rate, relay_rate


def section(plan: Any) -> dict[str, Any]:
    """The ``tasks`` section of ``python -m bench``."""
    return run(200 if getattr(plan, "name", "") == "quick" else 2000)


def render(data: dict[str, Any]) -> str:
    """The report's section on Celery tasks through the outbox (Markdown)."""
    return "\n".join(
        [
            "## Celery tasks through the outbox (`bench/tasks.py`)",
            "",
            f"{data['tasks']:,} tasks each way, PostgreSQL and RabbitMQ, nobody consuming (every"
            " side checked by its queue's depth); one process; load average at the end:"
            f" {data['loadavg']}.",
            "",
            "| path | tasks/s | vs `app.send_task` |",
            "| --- | --- | --- |",
            f"| `app.send_task`, `confirm_publish`, one at a time | "
            f"{data['direct_send_task_confirmed_per_s']:,} | 1.00x |",
            f"| `relay.celery.send_task` into the outbox, one commit per task | "
            f"{data['outbox_enqueue_per_s']:,} | {data['enqueue_vs_direct']:.2f}x |",
            f"| the relay publishing those rows (batches of 100, confirms per batch) | "
            f"{data['relay_publish_per_s']:,} | {data['relay_vs_direct']:.2f}x |",
            "",
            "The producer pays a database commit instead of a broker round trip; the relay then"
            " publishes the tasks faster than the application could one by one. Command:"
            " `python -m bench --only tasks`.",
            "",
        ]
    )


def run(tasks: int = 2000) -> dict[str, Any]:
    direct_rate = direct(tasks)
    enqueue_rate, relay_rate = through_outbox(tasks)
    return {
        "tasks": tasks,
        "direct_send_task_confirmed_per_s": round(direct_rate),
        "outbox_enqueue_per_s": round(enqueue_rate),
        "relay_publish_per_s": round(relay_rate),
        "enqueue_vs_direct": round(ratio(enqueue_rate, direct_rate), 2),
        "relay_vs_direct": round(ratio(relay_rate, direct_rate), 2),
        "loadavg": services.loadavg(),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps(run(200 if args.quick else args.tasks), indent=2))
