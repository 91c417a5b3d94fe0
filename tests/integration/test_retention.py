"""Retention on every database: the leased, paced purger, and rows deleted at send (with their
counts and per-key order kept)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
import sqlalchemy as sa

from relay.commands.doctor import retention as doctor_retention
from relay.commands.doctor.verdicts import PASS, WARN
from relay.config import Settings
from relay.dispatch.runtime import Runtime
from relay.retention import purger as purger_module
from relay.retention.pacing import PurgePacing
from relay.retention.purger import Purger
from relay.store import dialects
from relay.store.dispatch_path.store import DispatchStore
from relay.store.operations.retention import BEHIND_COUNTED_UP_TO, RetentionStore
from relay.store.operations.store import OperationsStore
from relay.store.schema.tables import outbox, outbox_progress
from tests.support import relaying
from tests.support.broker import Collector
from tests.support.env import wait_until
from tests.support.rows import count_by_status, enqueue_many

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def retention(engine: sa.Engine) -> Iterator[RetentionStore]:
    return RetentionStore(engine)


def _send(engine: sa.Engine, ids: list[int], seconds_ago: float) -> None:
    """Mark rows sent ``seconds_ago`` (database time)."""
    clock = dialects.for_name(engine.dialect.name)
    with engine.begin() as conn:
        conn.execute(
            sa.update(outbox)
            .where(outbox.c.id.in_(ids))
            .values(status="sent", sent_at=clock.now_plus(sa.literal(-seconds_ago, sa.Float)))
        )


def test_a_purge_run_deletes_everything_past_the_retention_in_small_batches(
    engine: sa.Engine, retention: RetentionStore
) -> None:
    """One run deletes every sent row past the retention, in several short transactions, keeps
    younger sent rows and unfinished ones, and records that it caught up."""
    old, young, waiting = (
        enqueue_many(engine, 450),
        enqueue_many(engine, 20),
        enqueue_many(engine, 5),
    )
    _send(engine, old, 7200)
    _send(engine, young, 10)
    pacing = PurgePacing(first_batch=100, min_batch=100, max_batch=100, duty=1.0)
    run = Purger(retention, 3600, "purger-a", pacing=pacing).run()
    assert (run.deleted, run.batches, run.behind, run.skipped) == (450, 5, 0, False)
    assert count_by_status(engine) == {"sent": 20, "pending": 5}
    assert len(waiting) == 5
    record = retention.record()
    assert record is not None
    assert (record.behind_rows, record.holder, record.falling_behind) == (0, None, False)


def test_a_second_purger_stands_aside_while_one_holds_the_lease(
    engine: sa.Engine, retention: RetentionStore
) -> None:
    """While one purger holds the lease another run does nothing; once it is given back (or
    expired) the other purges."""
    ids = enqueue_many(engine, 30)
    _send(engine, ids, 7200)
    assert retention.take_lease("purger-a", 60)
    skipped = Purger(retention, 3600, "purger-b").run()
    assert skipped.skipped
    assert count_by_status(engine) == {"sent": 30}
    retention.end_run("purger-a", 0)
    assert Purger(retention, 3600, "purger-b").run().deleted == 30


def test_a_run_stopped_by_its_budget_records_the_rows_left_and_a_growing_backlog_shows(
    engine: sa.Engine, retention: RetentionStore
) -> None:
    """A run that runs out of budget records how many rows it left past the retention; when
    that grows from one run to the next the record says the purge is falling behind."""
    ids = enqueue_many(engine, 300)
    _send(engine, ids, 7200)
    pacing = PurgePacing(first_batch=100, min_batch=100, max_batch=100, duty=1.0)
    first = Purger(retention, 3600, "p", pacing=pacing).run(budget_seconds=0)
    assert (first.deleted, first.behind) == (100, 200)
    more = enqueue_many(engine, 150)
    _send(engine, more, 7200)
    second = Purger(retention, 3600, "p", pacing=pacing).run(budget_seconds=0)
    assert second.behind == 250
    record = retention.record()
    assert record is not None
    assert record.falling_behind
    assert retention.past_retention(3600, 1000) == 250
    age = retention.oldest_sent_age()
    assert age is not None
    assert age > 3600


def test_delete_on_send_leaves_no_sent_row_and_counts_the_events(
    settings: Settings, engine: sa.Engine, collector: Collector
) -> None:
    """With RELAY_DELETE_ON_SEND every confirmed event is published once and its row deleted;
    the minute's count holds them all, and status and the console's chart read it."""
    ids = enqueue_many(engine, 120)
    report = relaying.drain(replace(settings, delete_on_send=True))
    assert report.sent == 120
    assert sorted(int(m.headers["outbox_id"]) for m in collector.drain(120)) == sorted(ids)
    assert count_by_status(engine) == {}
    ret = RetentionStore(engine)
    assert ret.sent_counted() == 120
    assert OperationsStore(engine).status().deleted_at_send == 120
    minutes = OperationsStore(engine).sent_per_minute()
    assert sum(m["sent"] for m in minutes) == 120
    assert all(m["max_lag"] >= 0 for m in minutes)


def test_delete_on_send_keeps_each_keys_order_after_its_earlier_rows_are_gone(
    settings: Settings, engine: sa.Engine, collector: Collector
) -> None:
    """A key whose earlier rows were deleted at send is still claimed in order: its progress
    lives in outbox_progress, so later rows of the key go out next, numbered on."""
    s = replace(settings, delete_on_send=True, batch_size=3, batch_max=3)
    enqueue_many(engine, 4, ordering_key="k1")
    relaying.drain(s)
    enqueue_many(engine, 4, ordering_key="k1")
    relaying.drain(s)
    seqs = [int(m.headers["ordering_seq"]) for m in collector.drain(8)]
    assert seqs == list(range(1, 9))
    assert count_by_status(engine) == {}
    with engine.connect() as conn:
        progress = conn.execute(sa.select(outbox_progress.c.sent_seq)).scalar_one()
    assert progress == 8


def test_a_fenced_delete_leaves_a_row_another_worker_reclaimed(engine: sa.Engine) -> None:
    """The delete at send is fenced like the mark: a worker whose lease was taken over deletes
    nothing of that row."""
    (row_id,) = enqueue_many(engine, 1)
    store = DispatchStore(engine, delete_on_send=True)
    (claimed,) = store.claim("w1", 10, 30)
    with engine.begin() as conn:
        conn.execute(sa.update(outbox).values(locked_by="w2", attempt=outbox.c.attempt + 1))
    done = store.complete("w1", sent=[claimed])
    assert (done.sent, done.lost) == (0, 1)
    assert count_by_status(engine) == {"processing": 1}
    assert row_id == claimed.id


def test_doctor_warns_when_the_purge_falls_behind_and_the_metrics_show_it(
    settings: Settings, engine: sa.Engine, retention: RetentionStore
) -> None:
    """Rows past the retention growing between two runs make `relay doctor` warn, and the
    gauges report what the last run left and the oldest sent row's age."""
    s = replace(settings, retention_seconds=3600, purge_interval_seconds=600)
    assert doctor_retention.retention(s).status == PASS
    pacing = PurgePacing(first_batch=100, min_batch=100, max_batch=100, duty=1.0)
    for n in (150, 300):
        ids = enqueue_many(engine, n)
        _send(engine, ids, 7200)
        Purger(retention, 3600, "p", pacing=pacing).run(budget_seconds=0)
    check = doctor_retention.retention(s)
    assert check.status == WARN
    assert "falling behind" in check.detail
    behind, oldest = OperationsStore(engine).retention_gauges()
    assert behind == 250
    assert oldest is not None
    assert oldest > 7000


def test_a_run_counts_what_it_left_no_further_than_the_cap_and_the_doctor_says_so(
    settings: Settings,
    engine: sa.Engine,
    retention: RetentionStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run stopped by its budget counts the rows it left up to a cap, not all of them (a
    count of millions cost more than the purge it reports on), and a record at the cap makes
    `relay doctor` warn, though two runs at the cap cannot show growth."""
    monkeypatch.setattr(purger_module, "BEHIND_COUNT_CAP", 40)
    ids = enqueue_many(engine, 200)
    _send(engine, ids, 7200)
    pacing = PurgePacing(first_batch=50, min_batch=50, max_batch=50, duty=1.0)
    for _ in range(2):
        run = Purger(retention, 3600, "p", pacing=pacing).run(budget_seconds=0)
        assert (run.deleted, run.behind) == (50, 40)
    assert retention.past_retention(3600, 1000) == 100
    record = retention.record()
    assert record is not None
    assert not record.falling_behind
    assert retention.take_lease("p", 60)
    retention.end_run("p", BEHIND_COUNTED_UP_TO)
    s = replace(settings, retention_seconds=3600, purge_interval_seconds=600)
    check = doctor_retention.retention(s)
    assert check.status == WARN
    assert f"at least {BEHIND_COUNTED_UP_TO:,} sent rows" in check.detail


def _write_ago(engine: sa.Engine, ids: list[int], seconds_ago: float, **values: object) -> None:
    """Make rows look written ``seconds_ago`` (database time), with other ``values``."""
    clock = dialects.for_name(engine.dialect.name)
    written = clock.now_plus(sa.literal(-seconds_ago, sa.Float))
    with engine.begin() as conn:
        conn.execute(
            sa.update(outbox).where(outbox.c.id.in_(ids)).values(created_at=written, **values)
        )


def test_delivery_lag_is_the_oldest_due_pending_rows_age(
    engine: sa.Engine, retention: RetentionStore
) -> None:
    """The purge's probe of delivery: nothing pending reads None; a row waiting for its retry
    is not late, the oldest due one is."""
    assert retention.delivery_lag() is None
    waiting, due, fresh = enqueue_many(engine, 1), enqueue_many(engine, 1), enqueue_many(engine, 1)
    clock = dialects.for_name(engine.dialect.name)
    later = clock.now_plus(sa.literal(600.0, sa.Float))
    _write_ago(engine, waiting, 120, next_retry_at=later)
    _write_ago(engine, due, 30)
    lag = retention.delivery_lag()
    assert lag is not None
    assert 29 < lag < 60
    _write_ago(engine, due, 0, status="sent")
    lag = retention.delivery_lag()
    assert lag is not None
    assert lag < 29, "the row waiting for its retry counted, or the sent one"
    assert fresh


def test_the_purge_yields_to_late_delivery_and_takes_its_duty_back(
    engine: sa.Engine, retention: RetentionStore
) -> None:
    """While the oldest due pending row is later than the threshold, each batch halves the
    purge's duty (it rests longer) and the purge still deletes everything past the
    retention; once delivery is on time again the next run's batches double it back."""
    old = enqueue_many(engine, 300)
    _send(engine, old, 7200)
    late = enqueue_many(engine, 3)
    _write_ago(engine, late, 30)
    pacing = PurgePacing(first_batch=50, min_batch=50, max_batch=50, duty=1.0, min_duty=0.25)
    purger = Purger(retention, 3600, "p", pacing=pacing, clock=_Ticks(0.01))
    run = purger.run()
    assert (run.deleted, run.behind, run.yields) == (300, 0, 6)
    assert purger.duty == pytest.approx(0.25)
    _write_ago(engine, late, 0, status="sent", sent_at=None)
    more = enqueue_many(engine, 200)
    _send(engine, more, 7200)
    run = purger.run()
    assert (run.deleted, run.yields) == (200, 1)
    assert purger.duty == pytest.approx(1.0)


class _Ticks:
    """A clock that moves ``step`` seconds at each reading: every batch "takes" one step."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_the_loop_runners_purger_keeps_the_retention(settings: Settings, engine: sa.Engine) -> None:
    """`relay dispatch --loop`'s purger deletes sent rows past the retention soon after it
    starts, and keeps the others."""
    old, young = enqueue_many(engine, 40), enqueue_many(engine, 5)
    _send(engine, old, 7200)
    _send(engine, young, 1)
    runtime = Runtime("default", replace(settings, retention_seconds=3600))
    loop = runtime.purge_loop()
    try:
        wait_until(lambda: count_by_status(engine) == {"sent": 5}, 30, "the purge")
    finally:
        loop.stop()
        runtime.close()


def test_doctor_warns_when_nothing_purges(settings: Settings, engine: sa.Engine) -> None:
    """A sent row older than the retention plus two purge intervals means no purger runs:
    `relay doctor` warns and names the runners that purge."""
    _send(engine, enqueue_many(engine, 3), 7200)
    check = doctor_retention.retention(
        replace(settings, retention_seconds=3600, purge_interval_seconds=600)
    )
    assert check.status == WARN
    assert "nothing purges" in check.detail
    assert "relay dispatch --loop" in check.fix
