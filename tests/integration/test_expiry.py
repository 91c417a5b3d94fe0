"""Events that expire (issue 47), on PostgreSQL, MariaDB and SQLite with real RabbitMQ: a row
claimed past its ``expires_at`` is dead-lettered with a reason naming the deadline and never
published, through the in-process dispatcher and a real ``relay dispatch --loop``; the
producer's ``expires_at``/``expires_in`` and ``RELAY_EXPIRE_AFTER``; ``relay failed retry`` of
expired rows; a Celery task's ``expires``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from celery import Celery
from prometheus_client import CollectorRegistry
from sqlalchemy.orm import Session

import relay
from relay.celery import send_task
from relay.commands import build_parser
from relay.commands.rows import failed
from relay.config import Settings
from relay.config.expiry import ExpireAfter
from relay.dispatch.dispatcher import Dispatcher
from relay.exceptions import ConfigError, EventError, SelectorError
from relay.observe.metrics import PrometheusObserver
from relay.produce import enqueue as producer_face
from relay.produce.enqueue import Producer
from relay.store import dialects
from relay.store.operations.store import OperationsStore
from relay.store.schema.tables import outbox
from tests.integration.test_cli import relay_cmd
from tests.support import relaying
from tests.support.broker import Collector
from tests.support.env import wait_until
from tests.support.fleet import Fleet, fleet_env
from tests.support.rows import rows

pytestmark = pytest.mark.timeout(120)

#: The past deadline the plain-SQL rows carry, and the reason it must give.
PAST = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
REASON = "expired at 2026-01-02T03:04:05Z, before it was published"


def _deadlines(dialect: str) -> tuple[str, str]:
    """(a fixed past deadline, one an hour ahead) as each database's plain SQL writes them:
    with its zone on PostgreSQL, UTC on MariaDB, ISO 8601 text with ``Z`` on SQLite (which the
    relay compares as a time, not as text)."""
    if dialect == "postgresql":
        return "timestamptz '2026-01-02 03:04:05+00'", "now() + interval '1 hour'"
    if dialect in ("mysql", "mariadb"):
        return "'2026-01-02 03:04:05'", "TIMESTAMPADD(HOUR, 1, UTC_TIMESTAMP(6))"
    return "'2026-01-02T03:04:05Z'", "strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '+1 hour')"


def _plain_sql_rows(engine: sa.Engine, n: int = 20) -> tuple[list[int], list[int]]:
    """``n`` rows past their deadline and ``n`` before it, interleaved, by plain SQL; their ids."""
    past, future = _deadlines(engine.dialect.name)
    expired: list[int] = []
    live: list[int] = []
    with engine.begin() as conn:
        for i in range(2 * n):
            deadline = past if i % 2 else future
            conn.exec_driver_sql(
                "INSERT INTO outbox (event_type, payload, expires_at) "
                f"VALUES ('reminder.due', '{{\"n\": {i}}}', {deadline})"
            )
        ids = list(conn.scalars(sa.select(outbox.c.id).order_by(outbox.c.id)))
    for i, row_id in enumerate(ids):
        (expired if i % 2 else live).append(row_id)
    return expired, live


def _check_outcome(
    engine: sa.Engine, collector: Collector, expired: list[int], live: list[int]
) -> None:
    """The live rows arrived and are sent; the expired ones are failed with the reason and no
    message of theirs is on the queue."""
    received = collector.drain(len(live), timeout=30, settle=1.0)
    assert sorted(m.outbox_id for m in received) == live
    found = rows(engine)
    assert {found[i]["status"] for i in live} == {"sent"}
    assert {(found[i]["status"], found[i]["last_error"]) for i in expired} == {("failed", REASON)}


def _counted(registry: CollectorRegistry, name: str) -> float:
    return sum(
        s.value
        for metric in registry.collect()
        for s in metric.samples
        if s.name == name and s.labels.get("event_type") == "reminder.due"
    )


def test_expired_rows_are_dead_lettered_unpublished_in_process(
    settings: Settings, engine: sa.Engine, collector: Collector
) -> None:
    """20 rows past their deadline are failed with it named, never published, and counted in
    relay_events_expired_total; 20 before theirs arrive."""
    expired, live = _plain_sql_rows(engine)
    registry = CollectorRegistry()
    d = Dispatcher.from_settings(settings, observer=PrometheusObserver(registry))
    try:
        report = d.drain(budget_seconds=60)
    finally:
        d.close()
        d.publisher.close()
        d.store.dispose()
    assert (report.sent, report.buried) == (20, 20)
    _check_outcome(engine, collector, expired, live)
    assert _counted(registry, "relay_events_expired_total") == 20
    assert _counted(registry, "relay_events_failed_total") == 20


def test_expired_rows_are_dead_lettered_unpublished_by_a_relay_process(
    db_url: str,
    amqp_url: str,
    exchange_name: str,
    engine: sa.Engine,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """The same through a real ``relay dispatch --loop`` process, which keeps running."""
    fleet = Fleet(fleet_env(db_url, amqp_url, exchange_name), tmp_path)
    fleet.start(1)
    try:
        expired, live = _plain_sql_rows(engine)

        def done() -> bool:
            return all(r["status"] in ("sent", "failed") for r in rows(engine).values())

        wait_until(done, 60, "every row sent or failed")
        fleet.assert_alive()
        _check_outcome(engine, collector, expired, live)
    finally:
        codes = fleet.stop()
    assert all(code == 0 for code in codes.values()), fleet.failures(codes)


def test_an_expired_keyed_row_holds_its_key(
    settings: Settings, engine: sa.Engine, operations: OperationsStore, collector: Collector
) -> None:
    """A key's expired head is dead-lettered and the rows after it wait, in order, as behind
    any failed head; purging it lets the key go on."""
    past, _ = _deadlines(engine.dialect.name)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO outbox (event_type, payload, ordering_key, expires_at) "
            f"VALUES ('reminder.due', '{{}}', 'k', {past})"
        )
    with Session(engine) as session, session.begin():
        relay.enqueue(session, "reminder.due", {}, ordering_key="k")
    report = relaying.drain(settings, budget_seconds=30)
    assert (report.sent, report.buried) == (0, 1)
    head, behind = sorted(rows(engine).values(), key=lambda r: r["id"])
    assert (head["status"], head["last_error"]) == ("failed", REASON)
    assert (behind["status"], behind["attempt"]) == ("pending", 0)
    assert operations.purge_failed([head["id"]]).changed == 1
    assert relaying.drain(settings, budget_seconds=30).sent == 1
    assert [m.outbox_id for m in collector.drain(1, timeout=30)] == [behind["id"]]


def _stored_deadline(engine: sa.Engine, row_id: int) -> datetime:
    with engine.connect() as conn:
        value = conn.scalar(sa.select(outbox.c.expires_at).where(outbox.c.id == row_id))
    assert isinstance(value, datetime)
    return value


def _db_now(engine: sa.Engine) -> datetime:
    with engine.connect() as conn:
        value = conn.scalar(sa.select(dialects.for_name(engine.dialect.name).now()))
    assert isinstance(value, datetime)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def test_enqueue_sets_the_deadline_it_is_given(engine: sa.Engine) -> None:
    """``expires_at`` is stored as given (any zone); ``expires_in`` counts from when the event
    is due (the database's now plus ``delay``)."""
    at = datetime(2031, 5, 6, 7, 8, 9, tzinfo=timezone(timedelta(hours=2)))
    with Session(engine) as session, session.begin():
        fixed = relay.enqueue(session, "reminder.due", {}, expires_at=at)
        within = relay.enqueue(session, "reminder.due", {}, expires_in=timedelta(hours=1))
        delayed = relay.enqueue(session, "reminder.due", {}, delay=600, expires_in=60)
        plain = relay.enqueue(session, "reminder.due", {})
    now = _db_now(engine)
    assert _stored_deadline(engine, fixed) == at
    assert abs((_stored_deadline(engine, within) - now).total_seconds() - 3600) < 60
    assert abs((_stored_deadline(engine, delayed) - now).total_seconds() - 660) < 60
    assert rows(engine, plain)[plain]["expires_at"] is None


#: (the deadline arguments, the field the error names, what it says).
BAD_DEADLINES: list[tuple[dict[str, Any], str, str]] = [
    (
        {"expires_at": datetime(2031, 1, 1, tzinfo=UTC), "expires_in": 60},
        "expires_at",
        "expires_at and expires_in are exclusive",
    ),
    ({"expires_at": datetime(2031, 1, 1)}, "expires_at", "must be timezone-aware"),
    ({"expires_at": "2031-01-01"}, "expires_at", "must be a datetime"),
    ({"expires_in": 0}, "expires_in", "positive duration"),
    ({"expires_in": -5}, "expires_in", "positive duration"),
    ({"expires_in": float("nan")}, "expires_in", "positive duration"),
    ({"expires_in": "1h"}, "expires_in", "timedelta or seconds"),
]


def test_a_bad_deadline_is_refused_and_nothing_is_written(engine: sa.Engine) -> None:
    """Both given, a naive time, a non-positive duration: EventError naming the field, raised
    in the caller's transaction before anything is written (the transaction goes on)."""
    with Session(engine) as session, session.begin():
        for kwargs, field, problem in BAD_DEADLINES:
            with pytest.raises(EventError) as info:
                relay.enqueue(session, "reminder.due", {}, **kwargs)
            assert (info.value.field, problem in str(info.value)) == (field, True), info.value
        relay.enqueue(session, "other.event", {})
    assert [r["event_type"] for r in rows(engine).values()] == ["other.event"]


def test_relay_expire_after_gives_defaults_by_the_most_specific_pattern(
    engine: sa.Engine,
) -> None:
    """Without a deadline of its own an event takes its type's default (the most specific
    pattern, whatever the order), counted from when it is due; ``never`` and unmatched types
    get none; a deadline given at enqueue wins."""
    rules = ExpireAfter.parse("*=7d,orders.*=1d,orders.reminder=1h,orders.audit=never")
    producer = Producer(expire_after=rules)
    with Session(engine) as session, session.begin():
        reminder = producer.enqueue(session, "orders.reminder", {})
        shipped = producer.enqueue(session, "orders.shipped", {}, delay=3600)
        audit = producer.enqueue(session, "orders.audit", {})
        other = producer.enqueue(session, "billing.paid", {})
        own = producer.enqueue(session, "orders.reminder", {}, expires_in=30)
    now = _db_now(engine)

    def after(row_id: int) -> float:
        return (_stored_deadline(engine, row_id) - now).total_seconds()

    assert abs(after(reminder) - 3600) < 60
    assert abs(after(shipped) - (86400 + 3600)) < 60
    assert abs(after(other) - 7 * 86400) < 60
    assert abs(after(own) - 30) < 60
    assert rows(engine, audit)[audit]["expires_at"] is None


@pytest.fixture
def fresh_producer() -> Iterator[None]:
    """The process-wide producer rebuilt from the environment, and forgotten afterwards."""
    producer_face._default = None
    yield
    producer_face._default = None


@pytest.mark.usefixtures("fresh_producer")
def test_relay_expire_after_is_read_from_the_environment_once(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``relay.enqueue`` reads RELAY_EXPIRE_AFTER at its first call and keeps it; a bad value
    raises ConfigError naming the bad part at enqueue, and nothing is written."""
    monkeypatch.setenv("RELAY_EXPIRE_AFTER", "orders.reminder=1x,*=7d")
    bad = r"'orders.reminder=1x': '1x' is not a duration"
    with Session(engine) as session, session.begin(), pytest.raises(ConfigError, match=bad):
        relay.enqueue(session, "orders.reminder", {})
    assert rows(engine) == {}
    monkeypatch.setenv("RELAY_EXPIRE_AFTER", "orders.reminder=2h")
    with Session(engine) as session, session.begin():
        first = relay.enqueue(session, "orders.reminder", {})
    monkeypatch.setenv("RELAY_EXPIRE_AFTER", "orders.reminder=5h")  # read once: not seen
    with Session(engine) as session, session.begin():
        second = relay.enqueue(session, "orders.reminder", {})
    now = _db_now(engine)
    for row_id in (first, second):
        assert abs((_stored_deadline(engine, row_id) - now).total_seconds() - 7200) < 60


def test_retrying_expired_rows_needs_a_new_deadline_or_none(
    settings: Settings, engine: sa.Engine, operations: OperationsStore, collector: Collector
) -> None:
    """A retry whose selection holds rows past their deadline refuses and changes nothing (a
    dry run counts them); a new deadline (``expires_in``, from the database's now) or none
    (``no_expiry``) retries them and they are delivered."""
    expired, _ = _plain_sql_rows(engine, n=3)
    relaying.drain(settings, budget_seconds=30)
    collector.drain(3, timeout=30)

    with pytest.raises(SelectorError, match="3 of the 3 failed events selected are past"):
        operations.retry_failed(None)
    assert {r["status"] for r in rows(engine, *expired).values()} == {"failed"}
    assert operations.retry_failed(None, dry_run=True).expired == 3
    with pytest.raises(SelectorError):
        operations.retry_failed(None, expires_in=60, no_expiry=True)

    assert operations.retry_failed([expired[0]], expires_in=7200).changed == 1
    deadline = _stored_deadline(engine, expired[0]) - _db_now(engine)
    assert abs(deadline.total_seconds() - 7200) < 60
    assert operations.retry_failed([expired[1]], no_expiry=True).changed == 1
    assert rows(engine, expired[1])[expired[1]]["expires_at"] is None

    report = relaying.drain(settings, budget_seconds=30)
    assert (report.sent, report.buried) == (2, 0)
    assert sorted(m.outbox_id for m in collector.drain(5, timeout=30)[3:]) == expired[:2]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_relay_failed_retry_says_what_expired_rows_need(
    db_url: str,
    settings: Settings,
    engine: sa.Engine,
    operations: OperationsStore,
    collector: Collector,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``relay failed retry`` of expired rows exits 2 naming ``--expires-in``/``--no-expiry``;
    its dry run counts them; ``--expires-in`` retries them; the two flags exclude each other."""
    expired, _ = _plain_sql_rows(engine, n=2)
    relaying.drain(settings, budget_seconds=30)
    collector.drain(2, timeout=30)

    refused = relay_cmd(db_url, "failed", "retry", "--all")
    assert refused.returncode == 2
    assert "2 of the 2 failed events selected are past their deadline" in refused.stderr
    assert "--expires-in DURATION" in refused.stderr
    assert "--no-expiry" in refused.stderr
    dry_run = build_parser().parse_args(["failed", "retry", "--all", "--dry-run"])
    assert failed(operations, dry_run) == 0
    assert "2 of them are past their deadline" in capsys.readouterr().out
    done = relay_cmd(db_url, "failed", "retry", "--all", "--expires-in", "2h")
    assert done.returncode == 0, done.stderr
    assert {r["status"] for r in rows(engine, *expired).values()} == {"pending"}
    with pytest.raises(SystemExit):
        build_parser().parse_args(["failed", "retry", "--all", "--no-expiry", "--expires-in", "1h"])


def test_a_celery_tasks_expires_is_its_rows_deadline(settings: Settings, engine: sa.Engine) -> None:
    """``send_task(expires=...)`` sets the row's expires_at (seconds from now, or a time); a
    task past it is dead-lettered by the same path, unpublished."""
    app = Celery("expiry-test", set_as_current=False)
    with engine.begin() as conn:
        send_task(conn, "tasks.remind", (1,), expires=3600, app=app)
        send_task(conn, "tasks.remind", (2,), expires=PAST, app=app)
    soon, late = sorted(rows(engine).values(), key=lambda r: r["id"])
    assert abs((soon["expires_at"] - _db_now(engine)).total_seconds() - 3600) < 60
    assert late["expires_at"] == PAST
    with engine.begin() as conn:  # leave only the expired task: nothing is published
        conn.execute(sa.delete(outbox).where(outbox.c.id == soon["id"]))
    report = relaying.drain(settings, budget_seconds=30)
    assert (report.sent, report.buried) == (0, 1)
    assert rows(engine, late["id"])[late["id"]]["last_error"] == REASON
