"""The issue's reproduction, as a user runs it: `relay dispatch --once` to an ``amqps://`` broker
(a TLS front for RabbitMQ, certificate for ``localhost``, CA trusted through ``SSL_CERT_FILE``):
delivers at ``localhost``, and at ``127.0.0.1`` (a name the certificate lacks) delivers nothing
and says why, spending no attempt."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import sqlalchemy as sa

from relay.store.engine import create_engine
from relay.store.schema.tables import outbox
from tests.support.broker import Collector
from tests.support.rows import count_by_status, enqueue_many, rows
from tests.support.tlsfront import Pki, server_context, tls_front


def _dispatch_once(db_url: str, events_url: str, exchange: str, ca: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")} | {
        "RELAY_DATABASE_URL": db_url,
        "RELAY_EVENTS_URL": events_url,
        "RELAY_EXCHANGE": exchange,
        "RELAY_CONFIRM_TIMEOUT_SECONDS": "3",
        "SSL_CERT_FILE": str(ca),
    }
    done = subprocess.run(
        [sys.executable, "-m", "relay", "dispatch", "--once"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout + done.stderr


def test_dispatch_verifies_the_broker_name(
    pg_url: str, amqp_url: str, exchange_name: str, tmp_path: Path
) -> None:
    pki = Pki(tmp_path)
    parts = urlsplit(amqp_url)
    target = (parts.hostname or "127.0.0.1", parts.port or 5672)
    engine = create_engine(pg_url)
    collector = Collector(amqp_url, exchange_name)
    try:
        with tls_front(target, server_context(pki.leaf("broker", "localhost"))) as front:
            enqueue_many(engine, 3)
            wrong = f"amqps://guest:guest@127.0.0.1:{front.port}//"
            out = _dispatch_once(pg_url, wrong, exchange_name, pki.ca_file)
            # The connection's fault, not the rows': none sent, no attempt spent.
            assert count_by_status(engine) == {"pending": 3}, out
            assert {r["attempt"] for r in rows(engine).values()} == {0}
            # Given back with the outage's delay; skip the wait, as time would.
            with engine.begin() as conn:
                conn.execute(sa.update(outbox).values(next_retry_at=None))
            assert "certificate verify failed" in out
            assert "guest:guest" not in out
            right = f"amqps://guest:guest@localhost:{front.port}//"
            out = _dispatch_once(pg_url, right, exchange_name, pki.ca_file)
            assert count_by_status(engine) == {"sent": 3}, out
            assert len(collector.drain(3, timeout=10)) == 3
    finally:
        collector.close()
        engine.dispose()
