"""Fault: the broker node a relay publishes to dies mid-drain, with a failover URL naming two
throw-away RabbitMQ nodes (``amqp://a;amqp://b``, Kombu's syntax). The nodes are not a cluster:
the failover of the relay's own connection is what is tested, so the test's exchange and queue
are declared on both, and the dead node is started again at the end to count what it confirmed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import cast

import pytest
import sqlalchemy as sa

from relay.store.schema.tables import outbox
from tests.support.broker import Collector, Received
from tests.support.env import wait_until
from tests.support.fleet import (
    IN_FLIGHT_BATCHES,
    Fleet,
    SteadyProducer,
    audit_delivery,
    drained,
    fleet_env,
    ids_with_status,
    report,
)
from tests.support.rabbitserver import RabbitNode, throwaway_cluster, throwaway_node

WORKERS = 2
BATCH_MAX = 200
RESUME_BOUND_SECONDS = 30.0


class BothQueues:
    """The test's queue on each node, drained as one (what ``audit_delivery`` reads)."""

    def __init__(self, *collectors: Collector) -> None:
        self.collectors = list(collectors)

    @property
    def received(self) -> list[Received]:
        return [m for c in self.collectors for m in c.received]

    def drain(self, expected: int, timeout: float = 30.0, settle: float = 0.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.received) < expected and time.monotonic() < deadline:
            self._take()
        settle_until = time.monotonic() + settle
        while time.monotonic() < settle_until:
            self._take()
        return self.received

    def _take(self) -> None:
        """One message from each queue (every queue asked: no short-circuit), else a pause."""
        took = [c._get_one() for c in self.collectors]
        if not any(took):
            time.sleep(0.02)


@pytest.fixture
def nodes() -> Iterator[tuple[RabbitNode, RabbitNode]]:
    with throwaway_node() as a, throwaway_node() as b:
        yield a, b


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_killing_the_connected_node_fails_over_to_the_next_and_loses_nothing(
    pg_url: str,
    nodes: tuple[RabbitNode, RabbitNode],
    exchange_name: str,
    engine: sa.Engine,
    tmp_path: Path,
) -> None:
    """Two relays on ``amqp://a;amqp://b`` publish to a; a is SIGKILLed mid-drain: the relays
    reconnect to b and go on (printed: seconds until delivery resumed), no process exits,
    nothing is lost (a's queue read after it is started again), nothing is dead-lettered."""
    a, b = nodes
    with ExitStack() as stack:
        on_b = Collector(b.url, exchange_name)
        stack.callback(on_b.close)
        on_a = Collector(a.url, exchange_name)
        env = fleet_env(pg_url, f"{a.url};{b.url}", exchange_name, batch_max=BATCH_MAX)
        fleet = Fleet(env, tmp_path)
        stack.callback(fleet.stop)
        producer = SteadyProducer(engine, total=6000, seconds=20.0)
        fleet.start(WORKERS)
        producer.start()
        wait_until(lambda: len(ids_with_status(engine, "sent")) >= 1000, 60, "1000 rows sent")
        a.kill()
        sent_at_kill = len(ids_with_status(engine, "sent"))
        killed = time.monotonic()
        resume_s = wait_until(
            lambda: len(ids_with_status(engine, "sent")) > sent_at_kill + 100,
            60,
            "delivery to resume on the other node",
        )
        committed = producer.join()
        drain_s = wait_until(lambda: drained(engine), 120, "the drain after the failover")
        assert all(w.alive() for w in fleet.workers), fleet.logs()
        assert on_b.drain(1, timeout=10), "nothing reached the second node"
        # What a confirmed before it died is on its disk: start it again and read its queue.
        received_on_a = on_a.received
        with suppress(Exception):
            on_a.conn.release()
        a.start()
        on_a = Collector(a.url, exchange_name)
        on_a.received = received_on_a
        stack.callback(on_a.close)
        bound = WORKERS * IN_FLIGHT_BATCHES * BATCH_MAX
        both = cast(Collector, BothQueues(on_a, on_b))  # the part of a Collector audits read
        result = audit_delivery(engine, both, committed, duplicate_bound=bound)
        logs = fleet.logs()
        codes = fleet.stop()
    assert set(codes.values()) == {0}, fleet.failures(codes)
    assert "connected to broker node" in logs
    report(
        "broker-failover",
        events=result.events,
        resume_after_kill_s=resume_s,
        since_kill_s=time.monotonic() - killed,
        final_drain_s=drain_s,
        duplicates=result.duplicates,
        bound=bound,
        failed=result.statuses.get("failed", 0),
    )
    assert resume_s <= RESUME_BOUND_SECONDS, f"delivery resumed {resume_s:.1f}s after the kill"


@pytest.fixture
def cluster() -> Iterator[list[RabbitNode]]:
    with throwaway_cluster(3) as nodes:
        yield nodes


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_quorum_queue_on_a_three_node_cluster_loses_nothing_when_the_relays_node_dies(
    pg_url: str, cluster: list[RabbitNode], exchange_name: str, engine: sa.Engine, tmp_path: Path
) -> None:
    """The issue's cluster case: a quorum queue (three replicas, its leader on node a, where
    it was declared) and two relays on ``amqp://a;amqp://b;amqp://c`` connected to a; a is
    SIGKILLed mid-drain: the queue elects a leader among the two left, the relays reconnect to
    b and go on, and every committed event is in the queue (read from c). Three nodes, not
    two: a quorum queue of two replicas has no majority once one is gone.

    While the queue elects its new leader RabbitMQ nacks the publishes to it (measured: about a
    second of nacks); a nack is a failed attempt (the message contract), so the relays run with
    the default RELAY_MAX_ATTEMPTS and a backoff that rides that out: nothing is dead-lettered.
    """
    a, _, c = cluster
    quorum = {"x-queue-type": "quorum"}
    Collector(a.url, exchange_name, queue_arguments=quorum).close(delete=False)
    with ExitStack() as stack:
        on_c = Collector(c.url, exchange_name, queue_arguments=quorum)
        stack.callback(on_c.close)
        url = ";".join(n.url for n in cluster)
        env = fleet_env(
            pg_url,
            url,
            exchange_name,
            batch_max=BATCH_MAX,
            max_attempts=10,
            backoff_base_seconds=0.5,
            backoff_max_seconds=5,
        )
        fleet = Fleet(env, tmp_path)
        stack.callback(fleet.stop)
        producer = SteadyProducer(engine, total=6000, seconds=20.0)
        fleet.start(WORKERS)
        producer.start()
        wait_until(lambda: len(ids_with_status(engine, "sent")) >= 1000, 60, "1000 rows sent")
        a.kill()
        sent_at_kill = len(ids_with_status(engine, "sent"))
        resume_s = wait_until(
            lambda: len(ids_with_status(engine, "sent")) > sent_at_kill + 100,
            60,
            "delivery to resume on the cluster's other nodes",
        )
        committed = producer.join()
        drain_s = wait_until(lambda: drained(engine), 120, "the drain after the failover")
        assert all(w.alive() for w in fleet.workers), fleet.logs()
        bound = WORKERS * IN_FLIGHT_BATCHES * BATCH_MAX
        result = audit_delivery(engine, on_c, committed, duplicate_bound=bound)
        with engine.connect() as conn:
            most_attempts = conn.execute(sa.select(sa.func.max(outbox.c.attempt))).scalar_one()
            retried = conn.execute(
                sa.select(sa.func.count()).where(outbox.c.attempt > 1)
            ).scalar_one()
        codes = fleet.stop()
    assert set(codes.values()) == {0}, fleet.failures(codes)
    report(
        "broker-cluster-failover",
        events=result.events,
        rows_nacked_and_retried=retried,
        most_attempts=most_attempts,
        resume_after_kill_s=resume_s,
        final_drain_s=drain_s,
        duplicates=result.duplicates,
        bound=bound,
        failed=result.statuses.get("failed", 0),
    )
    assert resume_s <= RESUME_BOUND_SECONDS, f"delivery resumed {resume_s:.1f}s after the kill"
