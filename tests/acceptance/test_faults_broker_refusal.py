"""Fault: the broker refuses one message (RabbitMQ's ``max_message_size``), under a real
``relay dispatch --loop`` against a throw-away RabbitMQ node (the shared one is never
reconfigured)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from relay.store.schema.tables import outbox
from tests.support.broker import Collector
from tests.support.env import wait_until
from tests.support.fleet import (
    Fleet,
    audit_delivery,
    enqueue_committed,
    fleet_env,
    ids_with_status,
    report,
)
from tests.support.rabbitserver import RabbitNode, throwaway_node

MAX_SIZE = 1_048_576
MAX_ATTEMPTS = 3
BATCH_MAX = 1000


@pytest.fixture
def node() -> Iterator[RabbitNode]:
    with throwaway_node({"max_message_size": str(MAX_SIZE)}) as n:
        yield n


@pytest.fixture
def node_collector(node: RabbitNode, exchange_name: str) -> Iterator[Collector]:
    c = Collector(node.url, exchange_name)
    yield c
    c.close()


@pytest.mark.timeout(180)
def test_an_oversized_event_fails_after_its_attempts_and_the_rest_is_delivered(
    pg_url: str,
    node: RabbitNode,
    exchange_name: str,
    node_collector: Collector,
    engine: sa.Engine,
    tmp_path: Path,
) -> None:
    """A 2 MiB event written by plain SQL among 500 good ones, broker max 1 MiB: the 500 are
    sent and delivered, the big one ends failed with RabbitMQ's reason after MAX_ATTEMPTS, and
    the relay never exits (issue 37: it used to release the batch and retry it forever)."""
    good = enqueue_committed(engine, 250, event_type="good.before")
    with engine.begin() as conn:
        big = conn.execute(
            sa.insert(outbox)
            .values(event_type="good.big", payload={"blob": "x" * (2 * MAX_SIZE)})
            .returning(outbox.c.id)
        ).scalar_one()
    good += enqueue_committed(engine, 250, event_type="good.after")
    env = fleet_env(
        pg_url,
        node.url,
        exchange_name,
        max_attempts=MAX_ATTEMPTS,
        batch_max=BATCH_MAX,
        backoff_base_seconds=0.1,
        backoff_max_seconds=0.5,
    )
    fleet = Fleet(env, tmp_path)
    try:
        fleet.start(1)
        took = wait_until(
            lambda: (
                big in ids_with_status(engine, "failed")
                and set(good) <= ids_with_status(engine, "sent")
            ),
            120,
            "the good events sent and the big one failed",
        )
        fleet.assert_alive()
        result = audit_delivery(
            engine,
            node_collector,
            [*good, big],
            failed=[big],
            duplicate_bound=MAX_ATTEMPTS * BATCH_MAX,
        )
        with engine.connect() as conn:
            attempt, error = conn.execute(
                sa.select(outbox.c.attempt, outbox.c.last_error).where(outbox.c.id == big)
            ).one()
        codes = fleet.stop()
    finally:
        fleet.stop()
    assert set(codes.values()) == {0}, fleet.failures(codes)
    assert attempt == MAX_ATTEMPTS
    assert error.startswith("broker refused: PRECONDITION_FAILED - message size "), error
    assert f"larger than configured max size {MAX_SIZE}" in error
    report(
        "broker-refusal",
        events=result.events,
        duplicates=result.duplicates,
        seconds=took,
        failed=result.statuses.get("failed", 0),
    )
