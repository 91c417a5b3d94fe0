"""The `relay` command against a real database: migrate, status, failed, purge-sent."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import sqlalchemy as sa

from relay.records import Buried
from relay.store.dispatch_path.store import DispatchStore
from tests.support.rows import count_by_status, enqueue_many


def relay_cmd(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RELAY_DATABASE_URL": db_url}
    return subprocess.run(
        [sys.executable, "-m", "relay", *args], env=env, capture_output=True, text=True, timeout=60
    )


def _bury(store: DispatchStore, n: int) -> None:
    events = store.claim("w", n, lease_seconds=60)
    store.complete("w", buried=[Buried(e, f"poison {e.id}") for e in events])


def test_status_json_reports_counts_age_and_failed(
    db_url: str, engine: sa.Engine, store: DispatchStore
) -> None:
    """`relay status --json` gives rows per status, the oldest pending age and failed count."""
    enqueue_many(engine, 3)
    _bury(store, 1)
    store.claim("w", 1, lease_seconds=60)
    out = relay_cmd(db_url, "status", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["counts"] == {"pending": 1, "processing": 1, "sent": 0, "failed": 1}
    assert report["failed"] == 1
    assert 0 <= report["oldest_pending_age_seconds"] < 60
    assert report["expired_leases"] == 0


def test_status_text_on_an_empty_outbox(db_url: str) -> None:
    """The human form prints one line per status."""
    out = relay_cmd(db_url, "status")
    assert out.returncode == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()[:4]] == [
        "pending",
        "processing",
        "sent",
        "failed",
    ]


def test_failed_list_retry_and_purge(db_url: str, engine: sa.Engine, store: DispatchStore) -> None:
    """Operators list dead letters, retry some (fresh attempts), purge the rest."""
    ids = enqueue_many(engine, 3)
    _bury(store, 3)
    listed = json.loads(relay_cmd(db_url, "failed", "list", "--json").stdout)["events"]
    assert [r["id"] for r in listed] == ids
    assert listed[0]["last_error"] == f"poison {ids[0]}"

    out = relay_cmd(db_url, "failed", "retry", str(ids[0]))
    assert out.returncode == 0, out.stderr
    assert count_by_status(engine) == {"pending": 1, "failed": 2}
    (again,) = store.claim("w", 10, lease_seconds=60)
    assert (again.id, again.attempt) == (ids[0], 1)

    assert relay_cmd(db_url, "failed", "purge", "--all").returncode == 0
    assert count_by_status(engine) == {"processing": 1}


def test_purge_sent_deletes_only_old_sent_rows(
    db_url: str, engine: sa.Engine, store: DispatchStore
) -> None:
    """purge-sent removes sent rows older than the retention and nothing else."""
    enqueue_many(engine, 5)
    store.complete("w", sent=store.claim("w", 3, lease_seconds=60))
    assert relay_cmd(db_url, "purge-sent", "--older-than", "1h").stdout.startswith("0 ")
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE outbox SET sent_at = created_at - interval '2 hours' WHERE status = 'sent'"
            )
            if engine.dialect.name == "postgresql"
            else sa.text("UPDATE outbox SET sent_at = '2000-01-01 00:00:00' WHERE status = 'sent'")
        )
    out = relay_cmd(db_url, "purge-sent", "--older-than", "1h", "--batch-size", "2")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("3 ")
    assert count_by_status(engine) == {"pending": 2}


def test_bad_configuration_fails_fast_naming_the_variable(db_url: str) -> None:
    """A bad RELAY_* value of a setting the command uses exits 2 with a message naming the
    variable; nothing runs (`relay status` would not read RELAY_BATCH_SIZE at all)."""
    env = {**os.environ, "RELAY_DATABASE_URL": db_url, "RELAY_BATCH_SIZE": "lots"}
    out = subprocess.run(
        [sys.executable, "-m", "relay", "dispatch", "--once"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "RELAY_BATCH_SIZE" in out.stderr


def test_migrate_is_idempotent(db_url: str) -> None:
    """`relay migrate` on an up-to-date database succeeds and changes nothing."""
    out = relay_cmd(db_url, "migrate")
    assert out.returncode == 0, out.stderr
    assert "head" in out.stdout
