"""Fault: poison events the broker keeps refusing (unroutable) mixed into a healthy stream."""

from __future__ import annotations

import time
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

GOOD = 4000
MAX_ATTEMPTS = 3


@pytest.fixture
def good_only(amqp_url: str, exchange_name: str) -> Iterator[Collector]:
    """The only queue on the exchange is bound to ``good.#``: anything else is unroutable."""
    c = Collector(amqp_url, exchange_name, binding_key="good.#")
    yield c
    c.close()


def _time_to_deliver(engine: sa.Engine, kinds: list[str]) -> tuple[list[int], float]:
    """Enqueue one event per kind; seconds until every ``good.*`` one of them is sent."""
    start = time.monotonic()
    ids = enqueue_committed(engine, len(kinds), event_type=kinds.__getitem__)
    good = {i for i, kind in zip(ids, kinds, strict=True) if kind.startswith("good.")}
    wait_until(lambda: good <= ids_with_status(engine, "sent"), 60, "the good events")
    return ids, time.monotonic() - start


@pytest.mark.timeout(150)
def test_poison_events_fail_after_their_attempts_and_never_delay_the_good_ones(
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    good_only: Collector,
    engine: sa.Engine,
    tmp_path: Path,
) -> None:
    """10% unroutable events: each ends failed with its error after MAX_ATTEMPTS; the good
    events drain in about the time they take with no poison at all."""
    env = fleet_env(
        pg_url,
        amqp_url,
        exchange_name,
        batch_size=100,
        max_attempts=MAX_ATTEMPTS,
        backoff_base_seconds=0.2,
        backoff_max_seconds=1,
    )
    fleet = Fleet(env, tmp_path)
    try:
        fleet.start(2)
        clean, clean_s = _time_to_deliver(engine, ["good.event"] * GOOD)
        kinds = ["poison.event" if i % 10 == 9 else "good.event" for i in range(GOOD + GOOD // 9)]
        mixed, mixed_s = _time_to_deliver(engine, kinds)
        poison = {i for i, kind in zip(mixed, kinds, strict=True) if kind == "poison.event"}
        buried = wait_until(
            lambda: ids_with_status(engine, "failed") == poison, 60, "the poison to be buried"
        )
        fleet.assert_alive()
        result = audit_delivery(engine, good_only, clean + mixed, failed=poison, duplicate_bound=0)
        logs = fleet.logs()
    finally:
        fleet.stop()
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(outbox.c.attempt, outbox.c.last_error).where(outbox.c.id.in_(poison))
        ).all()
    assert {r.attempt for r in rows} == {MAX_ATTEMPTS}
    assert all("unroutable" in r.last_error and "poison.event" in r.last_error for r in rows)
    assert mixed_s <= max(2 * clean_s, clean_s + 2.0), (clean_s, mixed_s)
    assert "Traceback" not in logs
    report(
        "poison",
        events=result.events,
        poison=len(poison),
        duplicates=result.duplicates,
        good_drain_clean_s=clean_s,
        good_drain_with_poison_s=mixed_s,
        poison_buried_after_s=buried,
    )
