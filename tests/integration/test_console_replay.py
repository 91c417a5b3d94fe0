"""Replaying from the console: its API and its pages, operators only, dry run first, audited;
every database, real RabbitMQ."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from relay.publishers.message import REPLAY_HEADER
from relay.store.operations.store import OperationsStore
from tests.support import console as web
from tests.support.broker import Collector
from tests.support.console import VIEWER_TOKEN, bearer
from tests.support.rows import rows


@pytest.fixture
def target(amqp_url: str, exchange_name: str) -> Iterator[Collector]:
    c = Collector(amqp_url, exchange_name, binding_key="order.*", queue=exchange_name + ".consumer")
    yield c
    c.close()


def test_api_replay_is_for_operators_counts_first_and_is_audited(
    engine: sa.Engine, amqp_url: str, exchange_name: str, target: Collector, collector: Collector
) -> None:
    """A view-only token is refused (403); a dry run counts and sends nothing; the replay
    reaches the queue alone with the replay header and leaves the rows; the audit names the
    operator; an unknown queue is a 400 naming it."""
    orders = web.add(engine, 4, "sent", event_type="order.created")
    web.add(engine, 2, "sent", event_type="user.seen")
    web.add(engine, 1, "failed", event_type="order.created")
    before = rows(engine)
    body = {"event_type": "order.*", "to_queue": target.queue_name}
    with web.client(engine, broker_url=amqp_url, exchange=exchange_name) as c:
        assert (
            c.post("/api/events/replay", json=body, headers=bearer(VIEWER_TOKEN)).status_code == 403
        )
        dry = c.post("/api/events/replay", json={**body, "dry_run": True}, headers=bearer())
        assert dry.status_code == 200, dry.text
        assert (dry.json()["matched"], dry.json()["sent"]) == (4, 0)
        assert target.drain(1, timeout=0.5) == []
        unknown = c.post("/api/events/replay", json={**body, "to_queue": "nope"}, headers=bearer())
        assert unknown.status_code == 400
        assert "no queue 'nope'" in unknown.json()["error"]

        done = c.post("/api/events/replay", json=body, headers=bearer(actor="grace"))

    assert done.status_code == 200, done.text
    report = done.json()
    assert (report["sent"], report["complete"]) == (4, True)
    got = target.drain(4, settle=0.3)
    assert [m.outbox_id for m in got] == orders
    assert {m.headers[REPLAY_HEADER] for m in got} == {report["replay_id"]}
    assert collector.drain(1, timeout=0.3) == []
    assert rows(engine) == before
    (entry,) = OperationsStore(engine).audit_log()
    assert (entry["actor"], entry["via"], entry["action"], entry["changed"]) == (
        "grace",
        "api",
        "replay",
        4,
    )


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_pages_show_the_dry_run_then_replay(
    engine: sa.Engine, amqp_url: str, exchange_name: str, target: Collector
) -> None:
    """In the browser: the sent events' list offers a replay to a queue, the dry run page
    shows the count, the confirmation replays and says how many were sent."""
    orders = web.add(engine, 3, "sent", event_type="order.created")
    with web.client(engine, broker_url=amqp_url, exchange=exchange_name) as c:
        csrf = web.signed_in(c)
        page = c.get("/events?status=sent").text
        assert 'id="bulk-replay"' in page
        form = {"csrf": csrf, "action": "replay", "status": "sent", "event_type": "order.*"}
        form["to_queue"] = target.queue_name
        preview = c.post("/actions/preview", data=form)
        assert preview.status_code == 200, preview.text
        assert '<strong id="matched">3</strong>' in preview.text
        assert target.drain(1, timeout=0.3) == []

        done = c.post("/actions/run", data=form)

    assert done.status_code == 200, done.text
    assert '<strong id="sent">3</strong>' in done.text
    assert [m.outbox_id for m in target.drain(3, settle=0.3)] == orders
    (entry,) = OperationsStore(engine).audit_log()
    assert (entry["actor"], entry["via"], entry["action"]) == ("ada", "console", "replay")
