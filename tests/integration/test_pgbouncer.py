"""Through a throwaway PgBouncer in transaction pooling mode (issue 28): the store, producers, the
inbox, the CLI's commands and `relay doctor` work on pooled connections, and the listener finds
that it hears nothing there instead of waiting for ever."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.consume import inbox
from relay.dispatch.listener import Listener
from relay.store.dispatch import Store
from relay.store.engine import create_engine
from tests.support.env import wait_until
from tests.support.pgbouncer import PgBouncer, pgbouncer  # noqa: F401  # the fixture
from tests.support.rows import count_by_status, enqueue_many

pytestmark = pytest.mark.timeout(90)

#: More rounds than psycopg's default prepare_threshold (5), on two client connections that
#: take turns on the pooler's server connections.
ROUNDS = 12


def _relay(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")} | env
    return subprocess.run(
        [sys.executable, "-m", "relay", *args], env=full, capture_output=True, text=True, timeout=60
    )


def test_store_claims_and_marks_through_the_pooler_without_prepared_statements(
    pgbouncer: PgBouncer,  # noqa: F811  # the fixture imported above
    pg_url: str,
) -> None:
    """Two stores taking turns claim and mark sent every row through the pooler: no statement
    is prepared on a server connection the next transaction may not get."""
    pooled = pgbouncer.url(pg_url)
    stores = [Store.from_url(pooled), Store.from_url(pooled)]
    try:
        enqueue_many(stores[0].engine, ROUNDS * 2 * 5)
        for _ in range(ROUNDS):
            for n, store in enumerate(stores):
                claimed = store.claim(f"w{n}", 5, 30)
                assert len(claimed) == 5
                assert store.complete(f"w{n}", sent=claimed).sent == 5
        assert count_by_status(stores[0].engine) == {"sent": ROUNDS * 2 * 5}
    finally:
        for store in stores:
            store.dispose()


def test_producers_and_the_inbox_work_through_the_pooler(
    pgbouncer: PgBouncer,  # noqa: F811
    pg_url: str,
) -> None:
    """relay.enqueue and inbox.claim on engines built by relay.store.engine, two taking turns,
    many times each: every event recorded, every inbox claim true once."""
    engines = [create_engine(pgbouncer.url(pg_url)) for _ in range(2)]
    try:
        for i in range(ROUNDS):
            for n, engine in enumerate(engines):
                with Session(engine) as session, session.begin():
                    relay.enqueue(session, "pooled.event", {"i": i}, ordering_key=f"k{n}")
                    assert inbox.claim(session, "consumer", f"{i}-{n}")
                    assert not inbox.claim(session, "consumer", f"{i}-{n}")
        assert count_by_status(engines[0]) == {"pending": ROUNDS * 2}
    finally:
        for engine in engines:
            engine.dispose()


def test_listener_through_the_pooler_goes_deaf_once_and_hands_over(
    pgbouncer: PgBouncer,  # noqa: F811
    pg_url: str,
) -> None:
    """Behind a transaction pooler the listener's own probe never comes back: it never claims
    to listen, marks itself deaf, logs it, calls on_deaf once and ends."""
    handed_over = threading.Event()
    listener = Listener(
        pgbouncer.url(pg_url), lambda: None, on_deaf=handed_over.set, probe_seconds=1
    )
    listener.start()
    try:
        wait_until(handed_over.is_set, 20, "the listener to hand over to polling")
        assert listener.deaf.is_set()
        assert not listener.listening.is_set()
        assert listener._thread is not None
        listener._thread.join(5)
        assert not listener._thread.is_alive(), "a deaf listener keeps no connection open"
    finally:
        listener.stop()


def test_exclusive_listener_through_the_pooler_takes_no_advisory_lock(
    pgbouncer: PgBouncer,  # noqa: F811
    pg_url: str,
) -> None:
    """Beat's exclusive listener behind a transaction pooler goes deaf before leading: no
    session advisory lock is left on a server connection that other clients would inherit."""
    handed_over = threading.Event()
    listener = Listener(
        pgbouncer.url(pg_url),
        lambda: None,
        exclusive=True,
        on_deaf=handed_over.set,
        probe_seconds=1,
    )
    listener.start()
    direct = create_engine(pg_url)
    try:
        wait_until(handed_over.is_set, 20, "the listener to hand over to polling")
        with direct.connect() as conn:
            held = conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
                    "(SELECT oid FROM pg_database WHERE datname = current_database())"
                )
            ).scalar()
        assert held == 0
    finally:
        listener.stop()
        direct.dispose()


def test_listener_on_a_direct_url_hears_itself(pg_url: str) -> None:
    """On a direct URL the probe comes back at once: listening, not deaf."""
    assert Listener(pg_url, lambda: None, probe_seconds=2).hears()


def _doctor(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    out = _relay(env, "doctor", "--json")
    return {c["name"]: c for c in json.loads(out.stdout)}


def test_doctor_names_the_pooler_and_the_setting_that_fixes_the_listener(
    pgbouncer: PgBouncer,  # noqa: F811
    pg_url: str,
    amqp_url: str,
) -> None:
    """relay doctor on a pooled URL: says it is a transaction pooler, warns that the listener
    hears nothing and names RELAY_LISTEN_URL; with that set to the direct URL, the listener
    passes; on the direct URL there is no pooler."""
    pooled = pgbouncer.url(pg_url)
    env = {"RELAY_DATABASE_URL": pooled, "RELAY_BROKER_URL": amqp_url}
    deaf = _doctor(env)
    assert "transaction mode" in deaf["transaction pooler"]["detail"]
    assert deaf["listener"]["status"] == "warn"
    assert "RELAY_LISTEN_URL" in deaf["listener"]["fix"]
    fixed = _doctor(env | {"RELAY_LISTEN_URL": pg_url})
    assert fixed["listener"]["status"] == "pass"
    direct = _doctor({"RELAY_DATABASE_URL": pg_url, "RELAY_BROKER_URL": amqp_url})
    assert direct["transaction pooler"]["detail"].startswith("none")
    assert direct["listener"]["status"] == "pass"


def test_operator_commands_work_through_the_pooler(
    pgbouncer: PgBouncer,  # noqa: F811
    pg_url: str,
) -> None:
    """status, pending list, failed list, purge-sent and inbox purge run on the pooled URL."""
    direct = create_engine(pg_url)
    try:
        enqueue_many(direct, 3)
        with direct.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE outbox SET status = 'sent', sent_at = now() - interval '2 days' "
                    "WHERE id = (SELECT min(id) FROM outbox)"
                )
            )
        env = {"RELAY_DATABASE_URL": pgbouncer.url(pg_url)}
        for args in (
            ("status", "--json"),
            ("pending", "list"),
            ("failed", "list"),
            ("purge-sent", "--older-than", "1d"),
            ("inbox", "purge", "--older-than", "1d"),
        ):
            out = _relay(env, *args)
            assert out.returncode == 0, f"relay {' '.join(args)}: {out.stderr}"
        assert count_by_status(direct) == {"pending": 2}
    finally:
        direct.dispose()
