"""A Celery fleet over ``RELAY_DATABASES=@PATH`` (issue 39): the file edited while beat and a
worker run, a database added and one dropped without a restart, and a list the checks refuse
changing nothing. Real Celery processes, PostgreSQL and RabbitMQ."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import celery_fleet, databases
from tests.support.broker import Collector
from tests.support.celery_fleet import unique_queue
from tests.support.env import relay_env
from tests.support.rows import insert_at

pytestmark = pytest.mark.timeout(180)


def test_a_celery_fleet_reads_its_database_file_again_when_it_changes(
    backend_pool: databases.BackendPool, amqp_url: str, exchange_name: str, tmp_path: Path
) -> None:
    listing = tmp_path / "databases"
    with (
        backend_pool.database("postgresql") as a,
        backend_pool.database("postgresql") as b,
        backend_pool.database("postgresql") as c,
    ):
        listing.write_text(f"# the tenants\na={a}\nb={b}\n")
        env = relay_env(
            databases=f"@{listing}",
            broker_url=amqp_url,
            exchange=exchange_name,
            queue=unique_queue(),
            tick_seconds=0.5,
        )
        collector = Collector(amqp_url, exchange_name)

        def tags(n: int) -> list[str]:
            """The tags of the next ``n`` messages (the collector keeps all it received)."""
            seen = len(collector.received)
            return sorted(m.body["tag"] for m in collector.drain(seen + n, timeout=30)[seen:])

        try:
            with celery_fleet.fleet(env, tmp_path) as f:
                f.beat()
                worker = f.worker("w1")
                insert_at(a, payload='{"tag": "a1"}')
                assert tags(1) == ["a1"]
                listing.write_text(f"b={b}\nc={c}\n")
                insert_at(c, payload='{"tag": "c1"}')
                insert_at(b, payload='{"tag": "b1"}')
                assert tags(2) == ["b1", "c1"]
                worker.wait_for_log("reloaded RELAY_DATABASES: 2 databases; added c; dropped a")
                insert_at(a, payload='{"tag": "a2"}')
                insert_at(b, payload='{"tag": "b2"}')
                assert tags(1) == ["b2"]  # a's row waits: no longer this fleet's
                late = collector.drain(len(collector.received) + 1, timeout=3)
                assert [m.body["tag"] for m in late][-1] == "b2"
                # A list the checks refuse changes nothing.
                listing.write_text("not a list\n")
                worker.wait_for_log("relay reload refused, the 2 databases stay", timeout=30)
                insert_at(c, payload='{"tag": "c2"}')
                assert tags(1) == ["c2"]
        finally:
            collector.close()
