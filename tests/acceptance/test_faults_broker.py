"""Fault: the broker cut off mid-drain (a TCP proxy resets and refuses connections), then back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa

from tests.support.broker import Collector
from tests.support.env import wait_until
from tests.support.fleet import (
    IN_FLIGHT_BATCHES,
    Fleet,
    SteadyProducer,
    audit_delivery,
    counted_sent,
    drained,
    fleet_env,
    ids_with_status,
    report,
)
from tests.support.proxy import TcpProxy, running_proxy

BATCH = 100
WORKERS = 3
MAX_ATTEMPTS = 3


@pytest.fixture
def proxy(amqp_url: str) -> Iterator[TcpProxy]:
    parts = urlsplit(amqp_url)
    with running_proxy(parts.hostname or "127.0.0.1", parts.port or 5672) as p:
        yield p


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_broker_outage_loses_nothing_marks_nothing_unconfirmed_and_burns_no_attempts(
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
    engine: sa.Engine,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    """Two outages of 4 s mid-drain, MAX_ATTEMPTS=3: nothing failed, nothing sent unconfirmed."""
    env = fleet_env(
        pg_url,
        proxy.url_for(amqp_url),
        exchange_name,
        batch_size=BATCH,
        lease_seconds=5,
        max_attempts=MAX_ATTEMPTS,
        backoff_base_seconds=0.2,
        backoff_max_seconds=2,
    )
    fleet = Fleet(env, tmp_path)
    producer = SteadyProducer(engine, total=8000, seconds=10.0)
    cuts, outage, recoveries = 0, 4.0, []
    try:
        fleet.start(WORKERS)
        producer.start()
        for threshold in (1000, 4000):
            wait_until(
                lambda t=threshold: len(ids_with_status(engine, "sent")) >= t,  # type: ignore[misc]
                60,
                f"{threshold} rows sent before the cut",
            )
            proxy.cut()
            cuts += 1
            sent_at_cut = len(ids_with_status(engine, "sent"))
            # The outage itself: the broker stays unreachable this long (not synchronisation).
            time.sleep(outage)
            assert all(w.alive() for w in fleet.workers), fleet.logs()
            during = len(ids_with_status(engine, "sent")) - sent_at_cut
            assert during <= WORKERS * IN_FLIGHT_BATCHES * BATCH, (
                f"{during} rows marked sent while cut off"
            )
            proxy.restore()
            restored = time.monotonic()
            wait_until(lambda: proxy.accepted > 0 and proxy.connections > 0, 30, "a reconnect")
            recoveries.append(time.monotonic() - restored)
        committed = producer.join()
        drain = wait_until(lambda: drained(engine), 90, "the drain after the outages")
        assert all(w.alive() for w in fleet.workers), fleet.logs()
        result = audit_delivery(
            engine, collector, committed, duplicate_bound=cuts * WORKERS * IN_FLIGHT_BATCHES * BATCH
        )
        logs = fleet.logs()
        codes = fleet.stop()
    finally:
        fleet.stop()
    assert set(codes.values()) == {0}, fleet.failures(codes)
    assert "broker unavailable" in logs
    report(
        "broker-cut",
        events=result.events,
        cuts=cuts,
        outage_s=outage,
        duplicates=result.duplicates,
        bound=cuts * WORKERS * IN_FLIGHT_BATCHES * BATCH,
        reconnect_s=max(recoveries),
        final_drain_s=drain,
        failed=result.statuses.get("failed", 0),
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("delete_on_send", [False, True], ids=["kept", "deleted-at-send"])
def test_broker_black_hole_burns_no_attempt_even_with_max_attempts_1(
    delete_on_send: bool,
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
    engine: sa.Engine,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    """The broker stops answering (no confirm, no error) for 6 s mid-drain: with
    RELAY_MAX_ATTEMPTS=1 any attempt spent on the outage would bury a row; none is buried
    (rows kept as sent, or deleted at send)."""
    env = fleet_env(
        pg_url,
        proxy.url_for(amqp_url),
        exchange_name,
        batch_size=BATCH,
        lease_seconds=5,
        confirm_timeout_seconds=1,
        max_attempts=1,
        backoff_base_seconds=0.2,
        backoff_max_seconds=2,
        delete_on_send=int(delete_on_send),
    )
    fleet = Fleet(env, tmp_path)
    producer = SteadyProducer(engine, total=5000, seconds=6.0)
    try:
        fleet.start(WORKERS)
        producer.start()
        wait_until(lambda: sent_so_far(engine, delete_on_send) >= 1000, 60, "1000 rows sent")
        proxy.stall()
        # The outage itself (not synchronisation): the broker is silent this long.
        time.sleep(6.0)
        proxy.restore()
        restored = time.monotonic()
        committed = producer.join()
        wait_until(lambda: drained(engine), 90, "the drain after the black hole")
        recover = time.monotonic() - restored
        fleet.assert_alive()
        result = audit_delivery(
            engine,
            collector,
            committed,
            duplicate_bound=WORKERS * IN_FLIGHT_BATCHES * BATCH,
            deleted_at_send=delete_on_send,
        )
        codes = fleet.stop()
    finally:
        fleet.stop()
    assert set(codes.values()) == {0}, fleet.failures(codes)
    report(
        "broker-black-hole" + ("-deleted-at-send" if delete_on_send else ""),
        events=result.events,
        outage_s=6.0,
        duplicates=result.duplicates,
        bound=WORKERS * IN_FLIGHT_BATCHES * BATCH,
        recover_s=recover,
    )


def sent_so_far(engine: sa.Engine, deleted_at_send: bool) -> int:
    """Rows marked sent, or events counted sent where rows are deleted at send."""
    return counted_sent(engine) if deleted_at_send else len(ids_with_status(engine, "sent"))
