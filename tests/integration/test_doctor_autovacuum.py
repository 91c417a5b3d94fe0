"""`relay doctor`'s autovacuum check, on a PostgreSQL server of the test's own (the shared one's
settings are not this test's to choose, nor to change)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import sqlalchemy as sa

from relay.store.schema import upgrade
from tests.support.env import wait_until
from tests.support.pgserver import throwaway_server


def _setting(url: str, name: str) -> str:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        value = str(conn.execute(sa.text(f"SHOW {name}")).scalar_one())
    engine.dispose()
    return value


def _autovacuum_check(url: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env |= {"RELAY_DATABASE_URL": url, "RELAY_EVENTS_URL": "amqp://guest:guest@127.0.0.1:9//"}
    out = subprocess.run(
        [sys.executable, "-m", "relay", "doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    checks = {c["name"]: c for c in json.loads(out.stdout)}
    return dict(checks["autovacuum"])


@pytest.mark.timeout(180)
def test_doctor_warns_when_nothing_vacuums_the_outbox() -> None:
    """PostgreSQL's defaults pass; the outbox's own autovacuum_enabled = false warns with the
    statement that resets it; the server's autovacuum = off warns, naming the setting."""
    with throwaway_server() as server:
        url = server.create_database("doctor_vacuum")
        upgrade.upgrade(url)
        check = _autovacuum_check(url)
        assert (check["status"], check["detail"]) == ("pass", "on for the outbox"), check

        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        with engine.begin() as conn:
            conn.execute(sa.text("ALTER TABLE outbox SET (autovacuum_enabled = false)"))
        check = _autovacuum_check(url)
        assert check["status"] == "warn", check
        assert "autovacuum_enabled = false" in check["detail"]
        assert "RESET (autovacuum_enabled)" in check["fix"]

        with engine.begin() as conn:
            conn.execute(sa.text("ALTER TABLE outbox RESET (autovacuum_enabled)"))
        admin = sa.create_engine(server.admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text("ALTER SYSTEM SET autovacuum = off"))
            conn.execute(sa.text("SELECT pg_reload_conf()"))
        admin.dispose()
        # The postmaster reloads after the signal: a new session sees the setting once it did.
        wait_until(lambda: _setting(url, "autovacuum") == "off", 30, "the reload")
        check = _autovacuum_check(url)
        assert check["status"] == "warn", check
        assert check["detail"].startswith("autovacuum = off on this server"), check
        assert "pg_reload_conf()" in check["fix"]
        engine.dispose()
