"""`relay failed list|retry|purge` and `relay pending list` with filters and dry runs, through
the real command on every database: only the selected rows change, a dry run changes none, and
an action without a selector refuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import sqlalchemy as sa

from relay.records import Buried, Status
from relay.store.dispatch_path.store import DispatchStore
from relay.store.schema.tables import outbox
from tests.support.rows import count_by_status, enqueue_many


def relay(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env["RELAY_DATABASE_URL"] = db_url
    return subprocess.run(
        [sys.executable, "-m", "relay", *args], env=env, capture_output=True, text=True, timeout=60
    )


def as_json(db_url: str, *args: str) -> Any:
    out = relay(db_url, *args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _dead_letters(engine: sa.Engine, store: DispatchStore) -> dict[str, list[int]]:
    """Failed rows of three types, with errors naming them; one keyed type."""
    ids = {
        "order.created": enqueue_many(engine, 3, "order.created"),
        "order.paid": enqueue_many(engine, 2, "order.paid"),
        "user.signed_up": enqueue_many(engine, 2, "user.signed_up"),
    }
    claimed = store.claim("w", 100, lease_seconds=60)
    store.complete("w", buried=[Buried(e, f"{e.event_type} unroutable (n{e.id})") for e in claimed])
    return ids


def test_filters_select_by_type_error_and_time(
    db_url: str, engine: sa.Engine, store: DispatchStore
) -> None:
    """--event-type globs, --error matches text in any case, --since/--until bound the time,
    and pages follow --after."""
    ids = _dead_letters(engine, store)
    orders = ids["order.created"] + ids["order.paid"]
    listed = as_json(db_url, "failed", "list", "--event-type", "order.*")
    assert [e["id"] for e in listed["events"]] == orders
    assert [
        e["id"] for e in as_json(db_url, "failed", "list", "--error", "USER.SIGNED")["events"]
    ] == ids["user.signed_up"]
    assert as_json(db_url, "failed", "list", "--since", "1h")["events"] != []
    assert as_json(db_url, "failed", "list", "--until", "1h")["events"] == []
    everything = sorted(i for group in ids.values() for i in group)
    page = as_json(db_url, "failed", "list", "--limit", "4")
    assert [e["id"] for e in page["events"]] == everything[:4]
    rest = as_json(db_url, "failed", "list", "--limit", "4", "--after", str(page["next"]))
    assert [e["id"] for e in rest["events"]] == everything[4:]
    assert rest["next"] is None
    assert as_json(db_url, "failed", "list", "--event-type", "order_%")["events"] == []  # literal


def test_dry_run_changes_nothing_then_retry_changes_only_the_selection(
    db_url: str, engine: sa.Engine, store: DispatchStore
) -> None:
    """A dry run reports what matches and changes nothing; the real retry moves exactly those
    rows back to pending; a purge by filter deletes only its selection."""
    ids = _dead_letters(engine, store)
    dry = as_json(db_url, "failed", "retry", "--event-type", "order.*", "--dry-run")
    assert dry == {"matched": 5, "changed": 0, "dry_run": True}
    text = relay(db_url, "failed", "retry", "--event-type", "order.*", "--dry-run")
    assert "would retry 5 failed events" in text.stdout
    assert count_by_status(engine) == {"failed": 7}
    assert as_json(db_url, "failed", "retry", "--event-type", "order.*") == {
        "matched": 5,
        "changed": 5,
    }
    with engine.connect() as conn:
        pending = (
            conn.execute(sa.select(outbox.c.id).where(outbox.c.status == Status.PENDING.value))
            .scalars()
            .all()
        )
    assert sorted(pending) == ids["order.created"] + ids["order.paid"]
    assert as_json(db_url, "failed", "purge", "--error", "signed_up") == {
        "matched": 2,
        "changed": 2,
    }
    assert count_by_status(engine) == {"pending": 5}


def test_an_action_without_a_selector_refuses(
    db_url: str, engine: sa.Engine, store: DispatchStore
) -> None:
    """retry and purge with no ids, no filter and no --all exit 2 and change nothing; --all
    with a filter is refused too."""
    _dead_letters(engine, store)
    for action in ("retry", "purge"):
        out = relay(db_url, "failed", action)
        assert out.returncode == 2
        assert "without a selector" in out.stderr
    out = relay(db_url, "failed", "purge", "--all", "--key", "k")
    assert out.returncode == 2
    assert count_by_status(engine) == {"failed": 7}
    assert as_json(db_url, "failed", "purge", "--all") == {"matched": 7, "changed": 7}


def test_pending_list_shows_the_backlog_and_held_leases(
    db_url: str, engine: sa.Engine, store: DispatchStore
) -> None:
    """`relay pending list` shows pending rows and processing ones with their lease holder;
    --status narrows it; the table says who holds a lease."""
    ids = enqueue_many(engine, 4, "order.created", ordering_key=None)
    store.claim("worker-7", 1, lease_seconds=60)
    listed = as_json(db_url, "pending", "list")["events"]
    assert [(e["id"], e["status"]) for e in listed] == [
        (ids[0], "processing"),
        *((i, "pending") for i in ids[1:]),
    ]
    held = as_json(db_url, "pending", "list", "--status", "processing")["events"]
    assert [e["locked_by"] for e in held] == ["worker-7"]
    table = relay(db_url, "pending", "list").stdout
    assert "held by worker-7 until" in table
    assert "due now" in table
    assert relay(db_url, "failed", "list").stdout.strip() == "no failed events"
