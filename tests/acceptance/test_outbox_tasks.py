"""Celery tasks sent through the outbox (``relay.celery.send_task``, ``delay_in``) run in an
unmodified ``celery worker`` of the application: once per committed transaction, never after a
rollback, routed by ``task_routes``, held by a countdown, through a broker outage, on Redis,
and from SQLite and MariaDB producers."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from relay.celery import send_task
from relay.config import Settings
from relay.dispatch.dispatcher import EXPIRED
from relay.store.engine import create_engine
from relay.store.schema.tables import outbox
from tests.support import relaying, tasks_app
from tests.support.celery_fleet import CELERY_BIN, Proc
from tests.support.env import wait_until
from tests.support.proxy import running_proxy

pytestmark = pytest.mark.timeout(300)


class Setup:
    """A database with the app's tables, queue names, and how to start its workers."""

    def __init__(self, db_url: str, broker: str, log_dir: Path) -> None:
        self.db_url, self.broker, self.log_dir = db_url, broker, log_dir
        tag = uuid.uuid4().hex[:8]
        self.default_queue, self.audit_queue = f"tasks.{tag}", f"audit.{tag}"
        self.engine = create_engine(db_url)
        tasks_app.metadata.create_all(self.engine)
        #: The producer's side of the application: routes are resolved from it at enqueue.
        self.app = tasks_app.make_app(broker, self.default_queue, self.audit_queue)

    @contextmanager
    def worker(self, name: str, queue: str) -> Iterator[Proc]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TASKS_TEST_")}
        env |= {
            "TASKS_TEST_DB": self.db_url,
            "TASKS_TEST_BROKER": self.broker,
            "TASKS_TEST_DEFAULT_QUEUE": self.default_queue,
            "TASKS_TEST_AUDIT_QUEUE": self.audit_queue,
            "PYTHONUNBUFFERED": "1",
        }
        args = [CELERY_BIN, "-A", "tests.support.tasks_app", "worker", "-P", "solo", "-l", "INFO"]
        args += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        # A node name of this test's own (its queue is): a Celery node's pidbox queue is
        # exclusive, so two tests' workers of one name on the shared broker would clash.
        node = f"{name}.{queue}@%h"
        proc = Proc(name, [*args, "-n", node, "-Q", queue], env, self.log_dir)
        try:
            proc.wait_for_log("ready.", timeout=60)
            yield proc
        finally:
            proc.stop()

    def ran(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.select(tasks_app.ran)).mappings()]

    def close(self) -> None:
        self.engine.dispose()


def _settings(db_url: str, events_url: str) -> Settings:
    return Settings(
        database_url=db_url,
        broker_url=events_url,
        exchange=f"outbox.{uuid.uuid4().hex[:8]}",
        tick_seconds=0.1,
        lease_seconds=10,
        backoff_base_seconds=0.05,
        backoff_max_seconds=0.5,
    )


@pytest.fixture
def setup(pg_url: str, amqp_url: str, tmp_path: Path) -> Iterator[Setup]:
    s = Setup(pg_url, amqp_url, tmp_path)
    yield s
    s.close()


def _order_with_task(s: Setup, n: int, commit: bool) -> str:
    """One business transaction: an order row and its task; commits or rolls back."""
    with s.engine.connect() as conn:
        tx = conn.begin()
        order_id = conn.execute(sa.insert(tasks_app.orders)).inserted_primary_key[0]  # type: ignore[index]
        task_id = s.app.tasks["tasks_test.record"].delay_in(conn, n, order_id)
        if n % 10 == 0:
            send_task(conn, "tasks_test.audit", (n,), app=s.app)
        (tx.commit if commit else tx.rollback)()
    return task_id


def test_committed_tasks_run_once_and_rolled_back_ones_never(setup: Setup) -> None:
    """600 tasks from committed transactions (and 60 audit tasks routed to their own queue)
    plus 100 from rolled-back ones: each committed task runs exactly once, saw its order row,
    audit tasks ran only on the audit worker, and no rolled-back task ran."""
    settings = _settings(setup.db_url, setup.broker)
    committed = [_order_with_task(setup, n, commit=True) for n in range(600)]
    for n in range(600, 700):
        _order_with_task(setup, n, commit=False)
    with (
        setup.worker("main", setup.default_queue),
        setup.worker("auditor", setup.audit_queue),
        relaying.running(settings),
    ):
        wait_until(lambda: len(setup.ran()) >= 660, 180, "660 tasks run")
        time.sleep(0.5)  # room for a duplicate to show up before the count is final
    rows = setup.ran()
    records = [r for r in rows if r["task"] == "record"]
    audits = [r for r in rows if r["task"] == "audit"]
    assert sorted(r["task_id"] for r in records) == sorted(committed)
    assert sorted(r["n"] for r in records) == list(range(600))
    assert all(r["saw_order"] for r in records)
    assert sorted(r["n"] for r in audits) == list(range(0, 600, 10))
    assert {r["hostname"].split(".")[0] for r in audits} == {"auditor"}
    assert {r["hostname"].split(".")[0] for r in records} == {"main"}


def test_a_countdown_holds_the_task_in_the_outbox(setup: Setup) -> None:
    """countdown=2: the task does not run before it is due and runs within a tick after."""
    settings = _settings(setup.db_url, setup.broker)
    with setup.worker("main", setup.default_queue), relaying.running(settings):
        with setup.engine.begin() as conn:
            setup.app.tasks["tasks_test.record"].apply_async_in(conn, (1,), countdown=2)
            committed = time.time()
        wait_until(lambda: len(setup.ran()) == 1, 30, "the delayed task")
    (row,) = setup.ran()
    assert 2.0 <= row["ran_at"] - committed < 2.0 + 2.0  # the tick is 0.1 s; 2 s of slack


def test_tasks_committed_while_the_broker_is_down_run_after_it_returns(
    setup: Setup, amqp_url: str
) -> None:
    """The relay's broker is cut when the transactions commit (they commit anyway: sending a
    task touches only the database); once it is back, every task runs once."""
    host, port = "127.0.0.1", int(amqp_url.rsplit(":", 1)[1].split("/")[0])
    with running_proxy(host, port) as proxy, setup.worker("main", setup.default_queue):
        settings = _settings(setup.db_url, proxy.url_for(amqp_url))
        proxy.cut()
        with relaying.running(settings):
            ids = [_order_with_task(setup, n, commit=True) for n in range(1, 51)]
            time.sleep(1.0)  # the relay meets the cut broker meanwhile
            assert setup.ran() == []
            proxy.restore()
            wait_until(lambda: len(setup.ran()) >= 50, 60, "50 tasks after the broker returned")
    assert sorted(r["task_id"] for r in setup.ran()) == sorted(ids)


def test_an_expired_task_is_not_published(setup: Setup) -> None:
    """A task whose expires passed before the relay got to it ends failed, unsent."""
    settings = _settings(setup.db_url, setup.broker)
    with setup.engine.begin() as conn:
        send_task(conn, "tasks_test.record", (7,), expires=0.2, app=setup.app)
    time.sleep(0.4)  # let the task expire before any relay runs
    assert relaying.drain(settings, budget_seconds=10).buried == 1
    with setup.engine.connect() as conn:
        status, error = conn.execute(sa.select(outbox.c.status, outbox.c.last_error)).one()
    assert status == "failed"
    assert error.startswith(f"{EXPIRED} ")
    assert error.endswith(", before it was published")


def test_redis_as_the_celery_broker(redis_url: str, pg_url: str, tmp_path: Path) -> None:
    """With Redis as the application's broker (and the relay publishing tasks there), every
    committed task runs once."""
    broker = redis_url.rsplit("/", 1)[0] + "/5"
    s = Setup(pg_url, broker, tmp_path)
    try:
        ids = [_order_with_task(s, n, commit=True) for n in range(1, 101)]
        with s.worker("main", s.default_queue), relaying.running(_settings(pg_url, broker)):
            wait_until(lambda: len(s.ran()) >= 100, 60, "100 tasks on Redis")
        assert sorted(r["task_id"] for r in s.ran()) == sorted(ids)
    finally:
        s.close()


@pytest.mark.parametrize("backend", ["mysql", "sqlite"])
def test_producers_on_mariadb_and_sqlite(
    backend: str, backend_pool: Any, amqp_url: str, tmp_path: Path
) -> None:
    """The same path with the outbox (and the app's tables) on MariaDB or SQLite."""
    with backend_pool.database(backend) as url:
        s = Setup(url, amqp_url, tmp_path)
        try:
            ids = [_order_with_task(s, n, commit=True) for n in range(1, 51)]
            with s.worker("main", s.default_queue), relaying.running(_settings(url, amqp_url)):
                wait_until(lambda: len(s.ran()) >= 50, 60, f"50 tasks from {backend}")
            rows = s.ran()
            assert sorted(r["task_id"] for r in rows) == sorted(ids)
            assert all(r["saw_order"] for r in rows)
        finally:
            s.close()


def test_bad_arguments_are_refused_at_enqueue(setup: Setup) -> None:
    """Arguments the JSON serializer cannot write raise EventError naming the field, inside
    the caller's transaction, and nothing is written."""
    from relay.exceptions import EventError

    with setup.engine.connect() as conn, conn.begin():
        with pytest.raises(EventError, match="args"):
            send_task(conn, "tasks_test.record", (object(),), app=setup.app)
        with pytest.raises(EventError, match="kwargs"):
            send_task(conn, "tasks_test.record", (), {"n": {1, 2}}, app=setup.app)
        with pytest.raises(EventError, match="args"):
            send_task(conn, "tasks_test.record", "12", app=setup.app)  # type: ignore[arg-type]
        assert conn.execute(sa.select(sa.func.count()).select_from(outbox)).scalar_one() == 0
