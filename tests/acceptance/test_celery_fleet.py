"""1 beat and 3 `celery -A relay worker` processes drain a backlog: each event once, none stuck;
one solo worker runs a burst of queued wake-ups back to back."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from celery import Celery

from relay.celery.names import CLAIM_AND_DISPATCH
from tests.support import services
from tests.support.broker import Collector
from tests.support.celery_fleet import counts, fleet, insert_rows, unique_queue
from tests.support.env import relay_env, wait_until

pytestmark = pytest.mark.timeout(300)

EVENTS = 20_000
#: Wake-ups queued at once for one solo worker; before PromptAcks about one in 25 was followed by
#: a wait of up to 10 s (6-11 waits in each of five runs of 200-300).
WAKE_UPS = 200


@pytest.mark.parametrize(
    ("celery_broker", "events_broker"),
    [("amqp", "amqp"), ("redis", "amqp"), ("redis", "redis")],
    ids=["rabbitmq", "redis-celery-broker", "redis-everywhere"],
)
def test_beat_and_three_workers_deliver_every_committed_event_exactly_once(
    celery_broker: str,
    events_broker: str,
    pg_url: str,
    engine: sa.Engine,
    exchange_name: str,
    tmp_path: Path,
) -> None:
    """Given 20,000 events committed while 1 beat + 3 workers run, every one is delivered once,
    rolled-back ones never, no row is left processing, and the fan-out put several workers on
    the backlog."""
    urls = {"amqp": services.AMQP_URL, "redis": services.REDIS_URL}
    services.require("RabbitMQ", services.AMQP_URL)
    services.require("Redis", services.REDIS_URL)
    env = relay_env(
        database_url=pg_url,
        broker_url=urls[celery_broker],
        events_url=urls[events_broker],
        exchange=exchange_name,
        queue=unique_queue(),
        tick_seconds=0.5,
        batch_size=200,
        max_fanout=4,
    )
    collector = Collector(urls[events_broker], exchange_name)
    try:
        with fleet(env, tmp_path) as f:
            procs = [f.beat(), *(f.worker(f"w{i}", ready=False) for i in range(3))]
            for proc in procs[1:]:
                proc.wait_for_log(" ready.")
            start = time.monotonic()
            rolled_back = insert_rows(engine, 100, commit=False)
            committed: list[int] = []
            for _ in range(20):
                committed += insert_rows(engine, EVENTS // 20)
            received = collector.drain(EVENTS, timeout=180, settle=2.0)
            wait_until(lambda: counts(engine).get("sent") == EVENTS, 30, "every row marked sent")
            elapsed = time.monotonic() - start
            busy = [p.name for p in procs[1:] if re.search(r"'sent': [1-9]", p.log())]
    finally:
        collector.close()
    ids = [m.outbox_id for m in received]
    print(f"{EVENTS} events through the fleet in {elapsed:.1f}s: {EVENTS / elapsed:.0f}/s")
    assert len(ids) == len(set(ids)), "duplicate deliveries"
    assert set(ids) == set(committed)
    assert not set(rolled_back) & set(ids)
    assert counts(engine) == {"sent": EVENTS}
    assert len(busy) >= 2, f"the tick did not fan the backlog out: only {busy} published"


def test_a_solo_worker_runs_a_burst_of_wake_ups_back_to_back(
    pg_url: str, amqp_url: str, exchange_name: str, tmp_path: Path
) -> None:
    """200 claim_and_dispatch queued at once, on an empty outbox (a few ms each), all run on one
    solo worker (prefetch 1) within 10 s: each ack leaves as soon as its task has run, so the
    worker never sits idle holding a task it already ran (the same 200 took 60-90 s, in waits of
    up to 10 s, before PromptAcks)."""
    queue = unique_queue()
    env = relay_env(
        database_url=pg_url,
        broker_url=amqp_url,
        exchange=exchange_name,
        queue=queue,
        tick_seconds=30,
    )
    sender = Celery(broker=amqp_url)  # a bare app: sends by name, wires nothing in this process
    try:
        with fleet(env, tmp_path) as f:
            worker = f.worker("w0", "--pool", "solo", "--concurrency", "1")
            with sender.producer_or_acquire() as producer:
                for _ in range(WAKE_UPS):
                    sender.send_task(CLAIM_AND_DISPATCH, queue=queue, producer=producer)

            def ran() -> int:
                return len(re.findall(r"claim_and_dispatch\[[^\]]+\] succeeded", worker.log()))

            took = wait_until(lambda: ran() == WAKE_UPS, 10, f"{WAKE_UPS} queued wake-ups to run")
    finally:
        sender.close()
    print(f"{WAKE_UPS} queued wake-ups run in {took:.1f}s")
