"""A Celery application whose tasks are sent through the outbox, for the acceptance tests.

``celery -A tests.support.tasks_app worker`` with ``TASKS_TEST_*`` variables: the database,
the Celery broker, the default queue and the queue that ``task_routes`` sends ``audit`` to.
``record`` writes a row saying whether it saw the order committed with it; ``audit`` writes
which worker ran it.
"""

from __future__ import annotations

import os
import time
from typing import Any

import sqlalchemy as sa
from celery import Celery

from relay.store.engine import create_engine

metadata = sa.MetaData()
orders = sa.Table("orders", metadata, sa.Column("id", sa.Integer, primary_key=True))
ran = sa.Table(
    "ran",
    metadata,
    sa.Column("pk", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task", sa.String(64), nullable=False),
    sa.Column("task_id", sa.String(64), nullable=False),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("saw_order", sa.Boolean, nullable=False),
    sa.Column("hostname", sa.String(255), nullable=False),
    sa.Column("ran_at", sa.Float, nullable=False),
)

engine = create_engine(os.environ.get("TASKS_TEST_DB", "sqlite://"))


def _write(task: str, task_id: str, n: int, saw_order: bool, hostname: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.insert(ran).values(
                task=task,
                task_id=task_id,
                n=n,
                saw_order=saw_order,
                hostname=hostname,
                ran_at=time.time(),
            )
        )


def make_app(broker: str, default_queue: str, audit_queue: str) -> Celery:
    """The application: its tasks, its default queue and its route for ``audit``."""
    app = Celery("tasks-test", broker=broker, task_cls="relay.celery:TransactionalTask")
    app.conf.update(
        task_default_queue=default_queue,
        task_routes={"tasks_test.audit": {"queue": audit_queue}},
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )

    @app.task(name="tasks_test.record", bind=True, shared=False)
    def record(self: Any, n: int, order_id: int | None = None) -> None:
        saw = False
        if order_id is not None:
            with engine.connect() as conn:
                query = sa.select(orders.c.id).where(orders.c.id == order_id)
                saw = conn.execute(query).first() is not None
        _write("record", self.request.id, n, saw, self.request.hostname or "")

    @app.task(name="tasks_test.audit", bind=True, shared=False)
    def audit(self: Any, n: int) -> None:
        _write("audit", self.request.id, n, False, self.request.hostname or "")

    return app


app = make_app(
    os.environ.get("TASKS_TEST_BROKER", "memory://"),
    os.environ.get("TASKS_TEST_DEFAULT_QUEUE", "tasks-test"),
    os.environ.get("TASKS_TEST_AUDIT_QUEUE", "tasks-test-audit"),
)
