"""Through a throwaway PgBouncer in transaction pooling mode (issue 28): the store, producers, the
inbox, the CLI's commands, `relay doctor` and the PostgreSQL wake-up work on pooled
connections."""

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
from relay.store.dispatch_path.store import DispatchStore
from relay.store.engine import create_engine
from relay.wakeup.watcher import SequenceWatcher
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
    stores = [DispatchStore.from_url(pooled), DispatchStore.from_url(pooled)]
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


def test_the_wake_up_watches_through_the_pooler(
    pgbouncer: PgBouncer,  # noqa: F811
    pg_url: str,
) -> None:
    """The PostgreSQL wake-up needs no session: through a transaction pooler it sees a commit
    made on the direct URL, including one whose transaction stayed open after its INSERT, and
    leaves no session state (no advisory lock, no LISTEN) on the pooler's server connections."""
    woken = threading.Event()
    watching = SequenceWatcher(
        DispatchStore.from_url(pgbouncer.url(pg_url), pool_size=2), woken.set, 0.025
    )
    watching.start()
    direct = create_engine(pg_url)
    try:
        wait_until(lambda: watching.looks >= 5 and watching.rule.horizon is None, 20, "a settle")
        assert watching.error is None
        with direct.connect() as conn:
            conn.execute(sa.text("INSERT INTO outbox (event_type, payload) VALUES ('p', '{}')"))
            woken.wait(1)  # the INSERT moved the sequence: woken already, before the commit
            woken.clear()
            conn.commit()
        assert woken.wait(2), "the looks for rows found the row after its commit"
        with direct.connect() as conn:
            state = conn.execute(
                sa.text(
                    "SELECT (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'), "
                    "(SELECT count(*) FROM pg_listening_channels())"
                )
            ).one()
        assert tuple(state) == (0, 0)
    finally:
        watching.stop()
        direct.dispose()


def _doctor(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    out = _relay(env, "doctor", "--json")
    return {c["name"]: c for c in json.loads(out.stdout)}


def test_doctor_names_the_pooler_and_passes_the_wake_up_through_it(
    pgbouncer: PgBouncer,  # noqa: F811
    pg_url: str,
    amqp_url: str,
) -> None:
    """relay doctor on a pooled URL says it is a transaction pooler and that the wake-up
    works there (no RELAY_LISTEN_URL needed); on the direct URL there is no pooler."""
    pooled = pgbouncer.url(pg_url)
    env = {"RELAY_DATABASE_URL": pooled, "RELAY_BROKER_URL": amqp_url}
    through = _doctor(env)
    assert "transaction mode" in through["transaction pooler"]["detail"]
    assert through["wake-up"]["status"] == "pass", through["wake-up"]
    assert "outbox_id_seq" in through["wake-up"]["detail"]
    direct = _doctor({"RELAY_DATABASE_URL": pg_url, "RELAY_BROKER_URL": amqp_url})
    assert direct["transaction pooler"]["detail"].startswith("none")
    assert direct["wake-up"]["status"] == "pass"


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
