"""`relay doctor`, `relay probe` and `relay status --watch` against real services."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from relay.records import Buried
from relay.store.dispatch_path.store import DispatchStore
from relay.store.operations.store import OperationsStore
from tests.support import databases
from tests.support.env import wait_until
from tests.support.rows import enqueue_many

DEAD_BROKER = "amqp://guest:guest@127.0.0.1:9//"


def relay(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")} | env
    return subprocess.run(
        [sys.executable, "-m", "relay", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def doctor(env: dict[str, str]) -> tuple[int, dict[str, dict[str, Any]]]:
    out = relay(env, "doctor", "--json")
    return out.returncode, {c["name"]: c for c in json.loads(out.stdout)}


@pytest.fixture
def env(db_url: str, amqp_url: str, exchange_name: str) -> dict[str, str]:
    return {
        "RELAY_DATABASE_URL": db_url,
        "RELAY_EVENTS_URL": amqp_url,
        "RELAY_BROKER_URL": amqp_url,
        "RELAY_EXCHANGE": exchange_name,
    }


def test_a_healthy_deployment_passes_with_warnings_and_fixes(
    env: dict[str, str], store: DispatchStore, engine: sa.Engine
) -> None:
    """Migrated database, reachable broker: no check fails (exit 0); the missing tick and the
    undeclared exchange are warnings that say how to fix them; a recorded tick passes."""
    code, checks = doctor(env)
    assert code == 0, checks
    for name in ("settings", "database", "schema", "indexes", "clock skew", "routing", "broker"):
        assert checks[name]["status"] == "pass", checks[name]
    assert checks["tick"]["status"] == "warn"
    assert "celery -A relay beat" in checks["tick"]["fix"]
    assert checks["exchange"]["status"] == "warn"
    if engine.dialect.name == "postgresql":
        assert checks["idle_in_transaction_session_timeout"]["status"] in ("warn", "pass")
    OperationsStore(engine).beat("relay.tick")
    assert doctor(env)[1]["tick"]["status"] == "pass"


def test_unroutable_events_are_named_with_the_fix(
    env: dict[str, str], store: DispatchStore, engine: sa.Engine
) -> None:
    """Events that failed as unroutable make the routing check warn, naming their type."""
    enqueue_many(engine, 2, "invoice.sent")
    events = store.claim("w", 10, lease_seconds=60)
    store.complete(
        "w", buried=[Buried(e, "unroutable: no queue bound to routing key") for e in events]
    )
    checks = doctor(env)[1]
    assert checks["routing"]["status"] == "warn"
    assert "invoice.sent (2)" in checks["routing"]["detail"]


def test_failures_exit_non_zero(
    env: dict[str, str], backend_pool: databases.BackendPool, engine: sa.Engine
) -> None:
    """A broker that refuses connections, an unmigrated database, a missing index and a bad
    setting each fail their check and make the command exit 1."""
    code, checks = doctor(env | {"RELAY_EVENTS_URL": DEAD_BROKER})
    assert (code, checks["broker"]["status"]) == (1, "fail")
    bad = relay(env | {"RELAY_LEASE_SECONDS": "soon"}, "doctor")
    assert bad.returncode == 1
    assert "FAIL  settings: RELAY_LEASE_SECONDS" in bad.stdout
    with engine.begin() as conn:
        conn.execute(sa.text("DROP INDEX ix_relay_inbox_received_at" + _on_table(engine)))
    code, checks = doctor(env)
    assert (code, checks["indexes"]["status"]) == (1, "fail")
    assert "ix_relay_inbox_received_at" in checks["indexes"]["detail"]
    with backend_pool.database("postgresql", migrated=False) as empty:
        code, checks = doctor(env | {"RELAY_DATABASE_URL": empty})
    assert (code, checks["schema"]["status"]) == (1, "fail")
    assert checks["schema"]["fix"] == "run `relay migrate`"


def _on_table(engine: sa.Engine) -> str:
    return " ON relay_inbox" if engine.dialect.name in ("mysql", "mariadb") else ""


def test_probe_ready_follows_the_database_and_the_broker(env: dict[str, str]) -> None:
    """ready exits 0 with both reachable, 1 naming the broker when it is not."""
    assert relay(env, "probe", "ready").returncode == 0
    out = relay(env | {"RELAY_EVENTS_URL": DEAD_BROKER}, "probe", "ready")
    assert out.returncode == 1
    assert "broker unreachable" in out.stderr


@pytest.mark.timeout(120)
def test_probe_live_follows_the_dispatch_loop(pg_url: str, amqp_url: str, tmp_path: Path) -> None:
    """`relay dispatch --loop --heartbeat-file F`: live passes while the loop runs, fails once
    the process is frozen past --max-age, and passes again when it resumes."""
    beat = str(tmp_path / "heartbeat")
    env = {
        "RELAY_DATABASE_URL": pg_url,
        "RELAY_EVENTS_URL": amqp_url,
        "RELAY_TICK_SECONDS": "0.2",
    }
    full = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")} | env
    loop = subprocess.Popen(
        [sys.executable, "-m", "relay", "dispatch", "--loop", "--heartbeat-file", beat],
        env=full,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    live = ("probe", "live", "--heartbeat-file", beat, "--max-age", "2")
    try:
        wait_until(lambda: relay(env, *live).returncode == 0, 60, "the loop's first heartbeat")
        loop.send_signal(signal.SIGSTOP)
        time.sleep(3)  # frozen longer than --max-age: that is what the probe must notice
        frozen = relay(env, *live)
        assert frozen.returncode == 1
        assert "stale heartbeat" in frozen.stderr
        loop.send_signal(signal.SIGCONT)
        wait_until(lambda: relay(env, *live).returncode == 0, 30, "the heartbeat after SIGCONT")
    finally:
        loop.send_signal(signal.SIGCONT)
        loop.terminate()
        loop.wait(30)


def test_status_watch_draws_a_live_table(env: dict[str, str], engine: sa.Engine) -> None:
    """`relay status --watch --count 2` redraws the counts, the send rate and the oldest age."""
    enqueue_many(engine, 3)
    out = relay(env, "status", "--watch", "--count", "2")
    assert out.returncode == 0, out.stderr
    for text in ("pending", "sent / s", "oldest pending", "expired leases"):
        assert text in out.stdout


def test_the_wake_up_check_names_a_missing_grant_and_a_sequence_cache(
    pg_url: str, amqp_url: str
) -> None:
    """PostgreSQL: the wake-up check passes on a migrated database; it warns, naming the GRANT,
    when the relay's role may not read outbox_id_seq, and naming ALTER SEQUENCE when sessions
    cache ids (an insert served from a cache moves nothing the watcher sees)."""
    env = {"RELAY_DATABASE_URL": pg_url, "RELAY_BROKER_URL": amqp_url}
    _, checks = doctor(env)
    assert checks["wake-up"]["status"] == "pass", checks["wake-up"]
    admin = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    role = f"relay_doc_{os.getpid()}"
    try:
        with admin.begin() as conn:
            conn.execute(sa.text(f"CREATE ROLE {role} LOGIN"))
            # Every table the doctor reads, and nothing on the sequence.
            conn.execute(sa.text(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"))
            conn.execute(sa.text("ALTER SEQUENCE outbox_id_seq CACHE 20"))
        _, checks = doctor(env)
        assert checks["wake-up"]["status"] == "warn"
        assert checks["wake-up"]["fix"] == "ALTER SEQUENCE public.outbox_id_seq CACHE 1"
        as_role = sa.make_url(pg_url).set(username=role).render_as_string(False)
        _, checks = doctor(env | {"RELAY_DATABASE_URL": as_role})
        assert checks["wake-up"]["status"] == "warn"
        assert "GRANT SELECT ON SEQUENCE public.outbox_id_seq" in checks["wake-up"]["fix"]
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text("ALTER SEQUENCE outbox_id_seq CACHE 1"))
            conn.execute(sa.text(f"DROP OWNED BY {role}"))
            conn.execute(sa.text(f"DROP ROLE {role}"))
        admin.dispose()


def test_a_check_the_role_may_not_run_fails_alone_and_the_others_still_run(
    pg_url: str, amqp_url: str
) -> None:
    """A role that may read the outbox but not ``relay_heartbeats``: the tick check fails
    naming the permission, the checks after it still report, and the doctor exits non-zero
    instead of stopping at the first database error."""
    admin = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    role = f"relay_doc2_{os.getpid()}"
    try:
        with admin.begin() as conn:
            conn.execute(sa.text(f"CREATE ROLE {role} LOGIN"))
            conn.execute(sa.text(f"GRANT SELECT ON outbox, relay_alembic_version TO {role}"))
        as_role = sa.make_url(pg_url).set(username=role).render_as_string(False)
        code, checks = doctor({"RELAY_DATABASE_URL": as_role, "RELAY_BROKER_URL": amqp_url})
        assert code == 1
        assert checks["tick"]["status"] == "fail"
        assert "permission denied" in checks["tick"]["detail"]
        assert {"routing", "broker"} <= set(checks)
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP OWNED BY {role}"))
            conn.execute(sa.text(f"DROP ROLE {role}"))
        admin.dispose()
