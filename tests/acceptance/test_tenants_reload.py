"""``kill -HUP`` on ``relay dispatch --loop`` over ``RELAY_DATABASES=@PATH`` (issue 39): the
file read again, a database added and one dropped without a restart, and a list the checks
refuse changing nothing. A real relay process, PostgreSQL and RabbitMQ."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from relay.store.engine import create_engine
from tests.support import databases
from tests.support.broker import Collector
from tests.support.env import wait_until
from tests.support.fleet import RELAY_BIN
from tests.support.rows import insert_at

pytestmark = pytest.mark.timeout(180)


def _pending(url: str) -> int:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            query = "SELECT count(*) FROM outbox WHERE status = 'pending'"
            return int(conn.execute(sa.text(query)).scalar_one())
    finally:
        engine.dispose()


def test_sighup_adds_and_drops_databases_without_a_restart(
    backend_pool: databases.BackendPool, amqp_url: str, exchange_name: str, tmp_path: Path
) -> None:
    listing, log = tmp_path / "databases", tmp_path / "relay.log"
    with (
        backend_pool.database("postgresql") as a,
        backend_pool.database("postgresql") as b,
        backend_pool.database("postgresql") as c,
        log.open("wb") as out,
    ):
        listing.write_text(f"# the tenants\na={a}\n\nb={b}\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        env.update(
            RELAY_DATABASES=f"@{listing}",
            RELAY_BROKER_URL=amqp_url,
            RELAY_EXCHANGE=exchange_name,
            RELAY_BACKOFF_BASE_SECONDS="0.1",
        )
        collector = Collector(amqp_url, exchange_name)
        proc = subprocess.Popen([RELAY_BIN, "dispatch", "--loop"], env=env, stdout=out, stderr=out)

        def logged(text: str) -> bool:
            assert proc.poll() is None, log.read_text(errors="replace")
            return text in log.read_text(errors="replace")

        def tags(n: int) -> list[str]:
            """The tags of the next ``n`` messages (the collector keeps all it received)."""
            seen = len(collector.received)
            return sorted(m.body["tag"] for m in collector.drain(seen + n, timeout=30)[seen:])

        try:
            wait_until(lambda: logged("relay starting over 2 databases"), 60, "the relay")
            insert_at(a, payload='{"tag": "a1"}')
            assert tags(1) == ["a1"]
            listing.write_text(f"b={b}\nc={c}\n")
            proc.send_signal(signal.SIGHUP)
            wait_until(
                lambda: logged("reloaded RELAY_DATABASES: 2 databases; added c; dropped a"),
                30,
                "the reload",
            )
            insert_at(c, payload='{"tag": "c1"}')
            insert_at(b, payload='{"tag": "b1"}')
            assert tags(2) == ["b1", "c1"]
            insert_at(a, payload='{"tag": "a2"}')
            insert_at(b, payload='{"tag": "b2"}')
            assert tags(1) == ["b2"]  # a's row waits: no longer this relay's
            assert collector.drain(len(collector.received) + 1, timeout=2)[-1].body["tag"] == "b2"
            assert _pending(a) == 1
            # A list the checks refuse changes nothing.
            listing.write_text("not a list\n")
            proc.send_signal(signal.SIGHUP)
            wait_until(lambda: logged("relay reload refused, the 2 databases stay"), 30, "refusal")
            insert_at(c, payload='{"tag": "c2"}')
            assert tags(1) == ["c2"]
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            collector.close()
    assert code == 0, log.read_text(errors="replace")
