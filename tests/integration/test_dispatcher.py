"""The dispatch cycle on a real database: retries, dead letters, leases, broker outages."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa

from relay.config import Settings
from relay.dispatch.dispatcher import Dispatcher
from relay.observe.observers import Observer
from relay.publishers import for_url
from relay.records import ClaimedEvent, PublishResult
from relay.store.dispatch_path.store import DispatchStore
from relay.testing import InMemoryPublisher
from tests.support.broker import Collector
from tests.support.rows import count_by_status, enqueue_many, expire_leases, rows


class _Ceiling(random.Random):
    """Backoff always at the top of its range, so the growth is visible."""

    def uniform(self, a: float, b: float) -> float:
        return b


def _drain_until(dispatcher: Dispatcher, done: Any, timeout: float = 30.0) -> None:
    """Run cycles until ``done()``; bounded in time (backoffs must be able to elapse, however
    fast a cycle is) so a bug fails instead of hanging."""
    import time

    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError("the relay did not converge")
        dispatcher.run_once()
        dispatcher.breaker.record_success()


def test_failing_row_backs_off_then_dead_letters_while_others_flow(
    store: DispatchStore, engine: sa.Engine, settings: Settings, amqp_url: str, exchange_name: str
) -> None:
    """An unroutable event is rescheduled with growing delays, then `failed` with last_error;
    the routable events around it are all sent meanwhile."""
    collector = Collector(amqp_url, exchange_name, binding_key="good.#")
    settings = replace(settings, max_attempts=4, backoff_base_seconds=0.05, backoff_max_seconds=1)
    publisher = for_url(amqp_url, exchange_name)
    dispatcher = Dispatcher(store, publisher, settings, rng=_Ceiling())
    try:
        good = enqueue_many(engine, 120, "good.thing")
        (poison,) = enqueue_many(engine, 1, "nobody.listens")
        good += enqueue_many(engine, 120, "good.thing")
        delays: list[float] = []

        def poison_done() -> bool:
            row = rows(engine, poison)[poison]
            if row["status"] == "pending" and row["next_retry_at"] is not None:
                delay = (row["next_retry_at"] - row["updated_at"]).total_seconds()
                if not delays or abs(delays[-1] - delay) > 1e-6:
                    delays.append(delay)
            return bool(row["status"] == "failed")

        _drain_until(dispatcher, poison_done)
        row = rows(engine, poison)[poison]
        assert row["attempt"] == 4
        assert "unroutable" in row["last_error"]
        assert [round(d, 3) for d in delays] == [0.05, 0.1, 0.2]
        received = collector.drain(len(good), timeout=20, settle=0.2)
        assert sorted(m.headers["outbox_id"] for m in received) == sorted(good)
        assert count_by_status(engine) == {"sent": 240, "failed": 1}
    finally:
        publisher.close()
        collector.close()


def test_events_the_broker_refuses_are_logged_with_the_reason(
    store: DispatchStore,
    engine: sa.Engine,
    settings: Settings,
    amqp_url: str,
    exchange_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No queue bound: the run says why nothing was sent, not only a count of reschedules."""
    publisher = for_url(amqp_url, exchange_name)
    dispatcher = Dispatcher(store, publisher, settings)
    try:
        enqueue_many(engine, 3, "nobody.listens")
        with caplog.at_level("WARNING", logger="relay"):
            dispatcher.run_once()
    finally:
        publisher.close()
    (line,) = [r.getMessage() for r in caplog.records if "broker refused" in r.getMessage()]
    assert line.startswith("broker refused 3 events")
    assert f"no queue bound to routing key 'nobody.listens' on exchange '{exchange_name}'" in line
    assert count_by_status(engine) == {"pending": 3}


class _SlowPublisher(InMemoryPublisher):
    """Publishes like the double, but takes ``seconds`` per batch, while a rival tries to claim."""

    def __init__(self, seconds: float, rival: DispatchStore) -> None:
        super().__init__()
        self.seconds = seconds
        self.rival = rival
        self.rival_got: list[int] = []

    def publish(self, events: Sequence[ClaimedEvent]) -> PublishResult:
        import time

        deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline:
            self.rival_got += [e.id for e in self.rival.claim("rival", 100, lease_seconds=30)]
            time.sleep(0.05)
        return super().publish(events)


def test_lease_is_renewed_while_a_slow_batch_publishes(
    store: DispatchStore, engine: sa.Engine, settings: Settings
) -> None:
    """A batch that takes 3x the lease to publish keeps its rows: no rival claims them."""
    ids = enqueue_many(engine, 10)
    # A lease of 1.2 s: renewed every 0.4 s, a renewal may come 0.8 s late before a rival wins
    # (0.6 s, renewed every 0.2 s, lost a row on MariaDB at a load average of 9).
    settings = replace(settings, lease_seconds=1.2, confirm_timeout_seconds=0.5)
    publisher = _SlowPublisher(3.6, rival=DispatchStore(engine))
    report = Dispatcher(store, publisher, settings).run_once()
    assert publisher.rival_got == []
    assert (report.sent, report.lost) == (10, 0)
    assert publisher.ids == ids


class _LosingPublisher(InMemoryPublisher):
    """While publishing, the lease expires and another worker reclaims every row."""

    def __init__(self, engine: sa.Engine) -> None:
        super().__init__()
        self.engine = engine

    def publish(self, events: Sequence[ClaimedEvent]) -> PublishResult:
        expire_leases(self.engine)
        DispatchStore(self.engine).claim("thief", 100, lease_seconds=60)
        return super().publish(events)


def test_late_outcomes_after_a_lost_lease_change_nothing(
    store: DispatchStore, engine: sa.Engine, settings: Settings
) -> None:
    """Rows reclaimed by another worker mid-publish are counted lost, left to the new holder."""
    ids = enqueue_many(engine, 5)
    report = Dispatcher(store, _LosingPublisher(engine), settings).run_once()
    assert (report.sent, report.lost) == (0, 5)
    assert {r["locked_by"] for r in rows(engine, *ids).values()} == {"thief"}
    assert {r["status"] for r in rows(engine, *ids).values()} == {"processing"}


def test_broker_outage_gives_attempts_back_and_opens_the_breaker(
    store: DispatchStore, engine: sa.Engine, settings: Settings
) -> None:
    """Unreachable broker: rows go back to pending with attempt unchanged, nothing is claimed
    until the breaker's delay passes, and then everything is sent."""
    ids = enqueue_many(engine, 20)
    publisher = InMemoryPublisher(unavailable_times=1)
    clock = [100.0]
    dispatcher = Dispatcher(store, publisher, settings, clock=lambda: clock[0])
    report = dispatcher.run_once()
    assert (report.released, report.sent, report.broker_error is not None) == (20, 0, True)
    released = rows(engine, *ids)
    assert {r["status"] for r in released.values()} == {"pending"}
    assert {r["attempt"] for r in released.values()} == {0}
    assert all("simulated outage" in r["last_error"] for r in released.values())

    assert dispatcher.run_once().claimed == 0, "breaker open: no claim"
    clock[0] += 60
    with engine.begin() as conn:  # the rows' own retry delay has passed too (database time)
        conn.execute(sa.text("UPDATE outbox SET next_retry_at = NULL"))
    assert dispatcher.drain().sent == 20
    assert {r["attempt"] for r in rows(engine, *ids).values()} == {1}


def test_drain_runs_batches_until_one_comes_back_short(
    store: DispatchStore, engine: sa.Engine, settings: Settings
) -> None:
    """drain() keeps claiming while batches are full and stops on the first short one."""
    enqueue_many(engine, settings.batch_size * 3 + 7)
    publisher = InMemoryPublisher()
    report = Dispatcher(store, publisher, settings).drain()
    assert (report.cycles, report.sent) == (4, settings.batch_size * 3 + 7)
    assert publisher.ids == sorted(publisher.ids)
    assert count_by_status(engine) == {"sent": settings.batch_size * 3 + 7}


class _Claims(Observer):
    """Remembers how many rows each claim leased."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def claimed(self, events: Sequence[ClaimedEvent], seconds: float) -> None:
        self.sizes.append(len(events))  # an empty claim (the drain looking again) counts 0


def test_a_backlog_is_claimed_in_batches_growing_to_the_most(
    store: DispatchStore, engine: sa.Engine, settings: Settings
) -> None:
    """Full claims double from RELAY_BATCH_SIZE up to RELAY_BATCH_MAX; the drain still sends
    every row once, in id order, and the next drain starts small again."""
    settings = replace(settings, batch_size=10, batch_max=40)
    enqueue_many(engine, 10 + 20 + 40 + 40 + 15)
    claims, publisher = _Claims(), InMemoryPublisher()
    dispatcher = Dispatcher(store, publisher, settings, observer=claims)
    report = dispatcher.drain()
    assert [n for n in claims.sizes if n] == [10, 20, 40, 40, 15]
    assert (report.sent, report.drained) == (125, True)
    assert publisher.ids == sorted(set(publisher.ids))
    assert len(publisher.ids) == 125
    claims.sizes.clear()
    enqueue_many(engine, 25)
    assert dispatcher.drain().sent == 25
    assert [n for n in claims.sizes if n] == [10, 15]
    dispatcher.close()


def test_rejections_burn_attempts_and_dead_letter(
    store: DispatchStore, engine: sa.Engine, settings: Settings
) -> None:
    """Rejected events spend an attempt each time; after max_attempts they are failed."""
    (row_id,) = enqueue_many(engine, 1, "never.ok")
    publisher = InMemoryPublisher(unroutable={"never.ok"})
    dispatcher = Dispatcher(store, publisher, replace(settings, max_attempts=3))
    seen: list[tuple[str, int]] = []
    for _ in range(3):
        dispatcher.run_once()
        row = rows(engine, row_id)[row_id]
        seen.append((row["status"], row["attempt"]))
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE outbox SET next_retry_at = NULL"))
    assert seen == [("pending", 1), ("pending", 2), ("failed", 3)]
    assert publisher.messages == []


class _OutageAfter(InMemoryPublisher):
    """Confirms the first ``good`` batches, then finds the broker unreachable."""

    def __init__(self, good: int) -> None:
        super().__init__()
        self.good = good

    def publish(self, events: Sequence[ClaimedEvent]) -> PublishResult:
        if self.batches >= self.good:
            self.unavailable_times = 1
        return super().publish(events)


def test_drain_hands_back_the_batch_claimed_ahead_when_the_broker_goes_down(
    store: DispatchStore, engine: sa.Engine, settings: Settings
) -> None:
    """Pipelined drain: batch 2 meets an outage while batch 3 was already leased; both go back
    to pending with their attempts returned, nothing stays processing, batch 4 is untouched."""
    size = settings.batch_size
    ids = enqueue_many(engine, size * 4)
    report = Dispatcher(store, _OutageAfter(good=1), settings).drain()
    assert (report.sent, report.released, report.lost) == (size, 2 * size, 0)
    assert report.broker_error is not None
    after = rows(engine, *ids)
    assert count_by_status(engine) == {"sent": size, "pending": 3 * size}
    assert {after[i]["attempt"] for i in ids[size:]} == {0}
    assert all(after[i]["last_error"] for i in ids[size : 3 * size])
    assert not any(after[i]["last_error"] for i in ids[3 * size :])


def test_no_lease_keeper_outlives_a_drain(
    store: DispatchStore, engine: sa.Engine, settings: Settings
) -> None:
    """Every batch's lease keeper stops once its outcomes are recorded; close() ends the
    database thread."""
    import threading

    before = set(threading.enumerate())
    enqueue_many(engine, settings.batch_size * 3)
    dispatcher = Dispatcher(store, InMemoryPublisher(), settings)
    assert dispatcher.drain().sent == settings.batch_size * 3
    dispatcher.close()
    assert [t.name for t in set(threading.enumerate()) - before] == []


def test_a_pause_right_after_the_claim_committed_still_ages_the_batch(
    store: DispatchStore, engine: sa.Engine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's age runs from before the statement that leased it: a worker paused between
    the claim's commit and noting the time (a CI run once caught one there: a third batch of
    duplicates) still re-checks the batch before publishing it."""
    from relay.dispatch.dispatcher import Report

    clock = [0.0]
    claim = store.claim

    def claim_then_pause(*args: Any, **kwargs: Any) -> list[Any]:
        events = claim(*args, **kwargs)
        clock[0] += settings.lease_seconds  # SIGSTOP just after the commit
        return events

    monkeypatch.setattr(store, "claim", claim_then_pause)
    dispatcher = Dispatcher(store, InMemoryPublisher(), settings, clock=lambda: clock[0])
    enqueue_many(engine, 10)
    held = dispatcher.cycle.claim(10)
    assert held is not None
    expire_leases(engine)
    DispatchStore(engine).claim("thief", 10, lease_seconds=60)
    report = Report()
    assert dispatcher.cycle.still_held(held, report) is None, "published rows another worker took"
    assert report.lost == 10


def test_a_batch_that_waited_past_its_lease_publishes_only_rows_still_held(
    store: DispatchStore, engine: sa.Engine, settings: Settings
) -> None:
    """A batch claimed ahead that waited a whole lease (worker paused) is re-checked before
    publishing: rows another worker reclaimed meanwhile are dropped, the rest renewed and sent."""
    from relay.dispatch.dispatcher import Report

    clock = [0.0]
    publisher = InMemoryPublisher()
    dispatcher = Dispatcher(store, publisher, settings, clock=lambda: clock[0])
    ids = enqueue_many(engine, 10)
    held = dispatcher.cycle.claim(10)
    assert held is not None
    assert dispatcher.cycle.still_held(held, Report()) is held, "a fresh batch is not re-checked"
    expire_leases(engine)
    DispatchStore(engine).claim("thief", 4, lease_seconds=60)
    clock[0] += settings.lease_seconds
    report = Report()
    kept = dispatcher.cycle.still_held(held, report)
    assert kept is not None
    assert [e.id for e in kept.events] == ids[4:]
    assert report.lost == 4
    dispatcher.cycle.record(dispatcher.cycle.publish(kept), next_limit=0)
    held.keeper.stop()
    assert publisher.ids == ids[4:]
    after = rows(engine, *ids)
    assert {after[i]["locked_by"] for i in ids[:4]} == {"thief"}
    assert {after[i]["status"] for i in ids[4:]} == {"sent"}
