"""Events and tasks written through Django reach RabbitMQ through a real relay drain, a key's
events in commit order even when the first transaction stays open."""

from __future__ import annotations

import threading
import uuid

import kombu
import pytest
from celery import Celery
from django.db import transaction

import relay.django
from relay.config import Settings
from relay.exceptions import EventError
from tests.django.conftest import close
from tests.support import relaying
from tests.support.broker import Collector, remove
from tests.support.env import wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def relay_settings(django_db: str, settings: Settings) -> Settings:
    """The suite's relay settings, on the database Django writes to."""
    return settings


def test_keyed_second_transaction_is_delivered_after_the_open_first(
    relay_settings: Settings, collector: Collector
) -> None:
    """Transaction 1 enqueues key k and stays open; transaction 2 (another thread, another
    connection) enqueues k and commits as soon as it can. Nothing is relayed while 1 is open;
    after it commits, the relay delivers 1's event before 2's."""
    first_open, release, second_started = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with transaction.atomic():
                relay.django.enqueue("order.step", {"n": 1}, ordering_key="k")
                first_open.set()
                assert release.wait(60)
        except BaseException as exc:
            errors.append(exc)
        finally:
            close()

    def second() -> None:
        try:
            assert first_open.wait(60)
            second_started.set()
            with transaction.atomic():
                relay.django.enqueue("order.step", {"n": 2}, ordering_key="k")
        except BaseException as exc:
            errors.append(exc)
        finally:
            close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    try:
        wait_until(second_started.is_set, 30, "the second transaction to start")
        if not relay_settings.database_url.startswith("sqlite"):
            # SQLite has one writer at a time: the relay's claim would wait for transaction 1
            # like transaction 2 does, so it is only run where claims and writers overlap.
            assert relaying.drain(relay_settings).sent == 0
        assert threads[1].is_alive(), "the second writer did not wait for the key's first"
    finally:
        release.set()
        for thread in threads:
            thread.join(60)
    assert errors == []
    assert relaying.drain(relay_settings).sent == 2
    got = collector.drain(2)
    assert [m.body["n"] for m in got] == [1, 2]


def test_send_task_is_a_celery_message_after_commit(
    relay_settings: Settings, amqp_url: str
) -> None:
    """relay.django.send_task and the task class's delay_on_outbox write protocol-2 task
    messages that the relay publishes to the app's queue after commit, with the returned id;
    a rolled-back one is never sent; bad arguments and autocommit are refused."""
    queue = f"tasks.{uuid.uuid4().hex[:8]}"
    app = Celery("shop", broker=amqp_url, task_cls="relay.django:TransactionalTask")
    app.conf.task_default_queue = queue

    @app.task(name="shop.add", shared=False)  # type: ignore[untyped-decorator]
    def add(x: int, y: int) -> int:
        return x + y

    try:
        with pytest.raises(EventError, match="using database 'default' is in autocommit"):
            add.delay_on_outbox(1, 1)
        with transaction.atomic():
            with pytest.raises(EventError, match="args must be a list or tuple"):
                relay.django.send_task("shop.add", "2, 3", app=app)
            sent = relay.django.send_task("shop.add", (2, 3), app=app)
            delayed = add.delay_on_outbox(4, 5)
        with transaction.atomic():
            add.delay_on_outbox(0, 0)
            transaction.set_rollback(True)
        assert relaying.drain(relay_settings).sent == 2
        with kombu.Connection(amqp_url) as conn, conn.SimpleQueue(queue) as simple:
            got = []
            for _ in range(2):
                message = simple.get(timeout=10)
                got.append((message.headers["id"], message.headers["task"], message.payload[0]))
                message.ack()
            assert sorted(got) == sorted(
                [(sent, "shop.add", [2, 3]), (delayed, "shop.add", [4, 5])]
            )
            assert simple.qsize() == 0
    finally:
        remove(amqp_url, queues=[queue])
