"""Event ids unique across outboxes (issue 23): one consumer, through ``@relay.celery.on_event``
and its inbox, takes the events of three outboxes whose ids all start at 1, of a re-created
outbox table, and of an outbox upgraded to event ids while events were in flight."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.config import Settings
from relay.publishers import for_url
from relay.records import ClaimedEvent
from relay.store.engine import create_engine
from relay.store.schema import upgrade
from tests.acceptance.test_event_handlers import worker
from tests.support import databases, events_app, relaying
from tests.support.celery_fleet import unique_queue
from tests.support.env import wait_until

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def handled_db(engine: sa.Engine) -> sa.Engine:
    """The consumer's database: its handled rows and its inbox (the outbox chain, migrated)."""
    events_app.metadata.create_all(engine)
    return engine


@contextmanager
def _outbox(pool: databases.BackendPool, backend: str) -> Iterator[sa.Engine]:
    with pool.database(backend) as url:
        eng = create_engine(url)
        try:
            yield eng
        finally:
            eng.dispose()


def _settings(url: str, amqp_url: str, exchange: str) -> Settings:
    return Settings(database_url=url, broker_url=amqp_url, exchange=exchange)


def _enqueue(engine: sa.Engine, numbers: range) -> None:
    with Session(engine) as session, session.begin():
        for n in numbers:
            relay.enqueue(session, "order.created", {"n": n})


def _handled(engine: sa.Engine) -> list[tuple[str, int]]:
    """(message id, n) of every handled row."""
    h = events_app.handled
    with engine.connect() as conn:
        return [(r.message_id, r.n) for r in conn.execute(sa.select(h.c.message_id, h.c.n))]


def _url(engine: sa.Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def test_three_outboxes_numbered_from_one_take_effect_once_each(
    backend_pool: databases.BackendPool,
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    handled_db: sa.Engine,
    tmp_path: Path,
) -> None:
    """Two PostgreSQL outboxes and one MariaDB outbox, each numbering its rows from 1, relay
    400 events to one exchange; one consumer handles all 400, each once (outbox ids alone gave
    200 distinct message ids and 200 silently dropped events)."""
    queue = unique_queue()
    sizes = {"pg-a": 150, "pg-b": 150, "mariadb": 100}
    with (
        _outbox(backend_pool, "postgresql") as pg_a,
        _outbox(backend_pool, "postgresql") as pg_b,
        _outbox(backend_pool, "mysql") as maria,
        worker(pg_url, amqp_url, exchange_name, queue, tmp_path, "w1"),
    ):
        start = 0
        for eng, size in zip((pg_a, pg_b, maria), sizes.values(), strict=True):
            _enqueue(eng, range(start, start + size))
            report = relaying.drain(_settings(_url(eng), amqp_url, exchange_name))
            assert report.sent == size, report
            start += size
        wait_until(lambda: len(_handled(handled_db)) >= 400, 120, "400 events handled")
        rows = _handled(handled_db)
    assert sorted(n for _, n in rows) == list(range(400))
    assert len({message_id for message_id, _ in rows}) == 400


def test_a_recreated_outbox_table_does_not_collide_with_the_inbox(
    backend_pool: databases.BackendPool,
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    handled_db: sa.Engine,
    tmp_path: Path,
) -> None:
    """An outbox dropped and migrated again numbers its rows from 1 again; its new events are
    handled although the inbox still remembers the old table's."""
    queue = unique_queue()
    with (
        _outbox(backend_pool, "postgresql") as outbox,
        worker(pg_url, amqp_url, exchange_name, queue, tmp_path, "w1"),
    ):
        settings = _settings(_url(outbox), amqp_url, exchange_name)
        _enqueue(outbox, range(30))
        assert relaying.drain(settings).sent == 30
        wait_until(lambda: len(_handled(handled_db)) >= 30, 60, "the first table's events")
        outbox.dispose()
        upgrade.downgrade(_url(outbox), "base")
        upgrade.upgrade(_url(outbox))
        _enqueue(outbox, range(100, 130))
        with outbox.connect() as conn:
            assert conn.execute(sa.text("SELECT min(id) FROM outbox")).scalar_one() == 1
        assert relaying.drain(settings).sent == 30
        wait_until(lambda: len(_handled(handled_db)) >= 60, 60, "the new table's events")
    rows = _handled(handled_db)
    assert sorted(n for _, n in rows) == [*range(30), *range(100, 130)]
    assert len({message_id for message_id, _ in rows}) == 60


def _legacy_publish(url: str, amqp_url: str, exchange: str, ids: range) -> None:
    """What a relay before event ids sent for these rows: message_id = the outbox id."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT id, payload FROM outbox WHERE id BETWEEN :a AND :b ORDER BY id"),
                {"a": ids.start, "b": ids.stop - 1},
            ).all()
    finally:
        engine.dispose()
    created = datetime.now(UTC)
    events = [
        ClaimedEvent(row.id, "order.created", row.payload, None, None, 1, created) for row in rows
    ]
    publisher = for_url(amqp_url, exchange)
    try:
        result = publisher.publish(events)
    finally:
        publisher.close()
    assert len(result.confirmed) == len(events), result


def test_upgrade_in_flight_loses_nothing_and_duplicates_only_the_rows_in_flight(
    backend_pool: databases.BackendPool,
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    handled_db: sa.Engine,
    tmp_path: Path,
) -> None:
    """Under 0009, rows 1-10 were sent with their outbox ids and rows 11-30 published with them
    but not yet recorded (lease held by a relay that then stopped); 31-50 waited. After the
    migration the relay re-sends 11-50 with event ids: every event takes effect, and only the
    20 in flight at the upgrade take effect twice (the documented duplicate window)."""
    queue = unique_queue()
    with (
        backend_pool.database("postgresql", migrated=False) as url,
        worker(pg_url, amqp_url, exchange_name, queue, tmp_path, "w1"),
    ):
        upgrade.upgrade(url, "0009")
        engine = create_engine(url)
        try:
            with engine.begin() as conn:
                for n in range(1, 51):
                    conn.execute(
                        sa.text(
                            "INSERT INTO outbox (event_type, payload) VALUES ('order.created', :p)"
                        ),
                        {"p": f'{{"n": {n}}}'},
                    )
            _legacy_publish(url, amqp_url, exchange_name, range(1, 31))
            with engine.begin() as conn:
                conn.execute(sa.text("UPDATE outbox SET status = 'sent' WHERE id <= 10"))
                conn.execute(
                    sa.text(
                        "UPDATE outbox SET status = 'processing', attempt = 1, locked_by = 'old',"
                        " locked_until = now() - interval '1 second' WHERE id BETWEEN 11 AND 30"
                    )
                )
            wait_until(lambda: len(_handled(handled_db)) >= 30, 60, "the old relay's messages")
            upgrade.upgrade(url)
            report = relaying.drain(_settings(url, amqp_url, exchange_name))
            assert report.sent == 40, report
            wait_until(lambda: len(_handled(handled_db)) >= 70, 60, "the re-sent events")
        finally:
            engine.dispose()
    rows = _handled(handled_db)
    numbers = [n for _, n in rows]
    assert sorted(set(numbers)) == list(range(1, 51)), "an event was lost"
    assert sorted(n for n in set(numbers) if numbers.count(n) > 1) == list(range(11, 31))
    assert len(rows) == 70
