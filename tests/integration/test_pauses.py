"""Pauses and rate limits on the claim, against every database: held rows stay pending at
attempt 0 while the rest is claimed, a paused key resumes in order, a paused database claims
nothing, and a rate limit's bucket pays for what a claim takes."""

from __future__ import annotations

import json
import subprocess

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.config.rate_limits import RateLimit
from relay.observe.gauges import OutboxCollector
from relay.store.dispatch_path.store import DispatchStore
from relay.store.operations.pausing import PauseStore
from relay.store.operations.store import OperationsStore
from relay.store.schema.tables import rate_buckets
from tests.support.env import relay_env
from tests.support.fleet import RELAY_BIN
from tests.support.rows import enqueue_many, rows

pytestmark = pytest.mark.timeout(120)


def _keyed(engine: sa.Engine, event_type: str, keys: int, per_key: int, prefix: str = "k") -> None:
    with Session(engine) as session, session.begin():
        for n in range(per_key):
            for k in range(keys):
                relay.enqueue(session, event_type, {"n": n}, ordering_key=f"{prefix}{k}")


def _drain(engine: sa.Engine, **kwargs: object) -> list[tuple[str, str | None, int]]:
    """Claim and mark sent until nothing is claimable (a fresh store reads the pauses now)."""
    store = DispatchStore(engine, **kwargs)  # type: ignore[arg-type]
    taken = []
    while events := store.claim("w", 50, lease_seconds=60):
        taken += [(e.event_type, e.ordering_key, int(e.payload["n"])) for e in events]
        store.complete("w", sent=events)
    return taken


def test_paused_type_and_key_stay_pending_and_resume_in_order(engine: sa.Engine) -> None:
    """With ``mail.*`` and key ``k1`` paused, a drain takes everything else; the held rows are
    pending at attempt 0 without a lease, the backlog does not count them; resumed, each key
    is drained in its order."""
    pauses = PauseStore(engine)
    assert pauses.pause("event_type", "mail.*", reason="smtp down")
    assert not pauses.pause("event_type", "mail.*")  # already in force
    assert pauses.pause("key", "k1")
    enqueue_many(engine, 30, "orders.created")
    _keyed(engine, "mail.send", keys=2, per_key=5, prefix="m")  # held by the pattern
    _keyed(engine, "orders.shipped", keys=2, per_key=5)  # k1's held by the key

    taken = _drain(engine)
    assert {t for t, _, _ in taken} == {"orders.created", "orders.shipped"}
    assert all(key != "k1" for _, key, _ in taken)
    assert len(taken) == 30 + 5
    held = [r for r in rows(engine).values() if r["status"] == "pending"]
    assert len(held) == 10 + 5
    assert {(r["attempt"], r["locked_by"]) for r in held} == {(0, None)}
    assert DispatchStore(engine).backlog(100) == 0
    assert pauses.held_rows() == 15
    gauges = {
        m.name: m.samples[0].value for m in OutboxCollector(OperationsStore(engine)).collect()
    }
    assert gauges["relay_pauses"] == 2
    assert gauges["relay_paused_rows"] == 15
    assert gauges["relay_oldest_pause_age_seconds"] >= 0
    assert [(p.kind, p.value, p.reason) for p in pauses.paused()] == [
        ("event_type", "mail.*", "smtp down"),
        ("key", "k1", None),
    ]

    assert pauses.resume("event_type", "mail.*")
    assert pauses.resume("key", "k1")
    assert not pauses.resume("key", "k1")
    assert DispatchStore(engine).backlog(100) > 0
    resumed = _drain(engine)
    assert len(resumed) == 15
    for key in ("m0", "m1", "k1"):
        ns = [n for _, k, n in resumed if k == key]
        assert ns == list(range(5)), f"{key} out of order: {ns}"
    assert not [r for r in rows(engine).values() if r["status"] != "sent"]


def test_a_paused_database_claims_nothing(engine: sa.Engine) -> None:
    """A ``database`` pause: the relay claims nothing and sees no backlog; resumed, it does."""
    enqueue_many(engine, 5)
    PauseStore(engine).pause("database", "default")
    assert DispatchStore(engine).claim("w", 10, 60) == []
    assert DispatchStore(engine).backlog(10) == 0
    assert PauseStore(engine).gauges(100)[:2] == (1, 5)
    PauseStore(engine).resume("database", "default")
    assert len(DispatchStore(engine).claim("w", 10, 60)) == 5


def test_a_rate_limit_takes_what_its_bucket_holds(engine: sa.Engine) -> None:
    """``limited.*=0.01/s``: the first claim takes the other type whole and one row of the
    limited type (a full bucket holds one token: no refill worth a row for 100 s), the oldest;
    the next claims take no more of it, the bucket row shows the spend and the backlog counts
    the limited rows as no work."""
    enqueue_many(engine, 20, "limited.t")
    enqueue_many(engine, 10, "free.u")
    store = DispatchStore(engine, rate_limits=(RateLimit("limited.*", 0.01),))
    first = store.claim("w", 100, 60)
    assert sorted(e.event_type for e in first) == ["free.u"] * 10 + ["limited.t"]
    assert [e.payload["n"] for e in first if e.event_type == "limited.t"] == [0]
    enqueue_many(engine, 3, "free.u")
    assert [e.event_type for e in store.claim("w", 100, 60)] == ["free.u"] * 3
    with engine.connect() as conn:
        (tokens,) = conn.execute(sa.select(rate_buckets.c.tokens)).one()
    assert 0 <= tokens < 0.5
    assert store.backlog(100) == 0  # spent: no work until a token is back
    fresh = DispatchStore(engine, rate_limits=(RateLimit("limited.*", 0.01),))
    assert fresh.claim("w", 100, 60) == []  # another relay shares the same bucket


def test_a_key_paused_mid_run_keeps_its_order(engine: sa.Engine) -> None:
    """A key paused after its first rows were sent: its head waits; the rest of the key
    stays behind it, and after the resume the key continues from the head."""
    _keyed(engine, "orders.shipped", keys=1, per_key=10)
    store = DispatchStore(engine)
    first = store.claim("w", 3, 60)
    store.complete("w", sent=first)
    PauseStore(engine).pause("key", "k0")
    assert _drain(engine) == []
    PauseStore(engine).resume("key", "k0")
    assert [n for _, _, n in _drain(engine)] == list(range(len(first), 10))


def test_a_backlog_of_other_types_does_not_starve_a_limited_one(engine: sa.Engine) -> None:
    """Both waiting: a claim gives the limited type (within its bucket) up to half of the batch
    and the other types the rest, oldest first in each."""
    enqueue_many(engine, 30, "free.u")
    enqueue_many(engine, 30, "limited.t")
    store = DispatchStore(engine, rate_limits=(RateLimit("limited.*", 1000.0),))
    claimed = store.claim("w", 10, 60)
    by_type = {
        t: [e.payload["n"] for e in claimed if e.event_type == t] for t in ("free.u", "limited.t")
    }
    assert by_type == {"free.u": [0, 1, 2, 3, 4], "limited.t": [0, 1, 2, 3, 4]}


def test_the_commands_pause_list_and_resume(pg_url: str) -> None:
    """`relay pause` needs a selector (exit 2), takes one, says when it was already in force;
    `relay paused --json` lists it under the database's name; `relay resume` lifts it; with
    one database configured, `--source NAME` alone pauses it whatever NAME. (One database: the
    commands' SQL is the store's, tested on each above.)"""
    env = relay_env(database_url=pg_url)

    def relay_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [RELAY_BIN, *args], env=env, capture_output=True, text=True, timeout=60, check=False
        )

    refused = relay_cli("pause")
    assert refused.returncode == 2
    assert "--event-type" in refused.stderr
    assert relay_cli("pause", "--event-type", "mail.*", "--reason", "smtp").returncode == 0
    assert "already paused" in relay_cli("pause", "--event-type", "mail.*").stdout
    assert relay_cli("pause", "--source", "orders").returncode == 0
    listed = json.loads(relay_cli("paused", "--json").stdout)["databases"]["default"]
    assert [(p["kind"], p["value"], p["reason"]) for p in listed] == [
        ("event_type", "mail.*", "smtp"),
        ("database", "orders", None),
    ]
    assert "resumed" in relay_cli("resume", "--event-type", "mail.*").stdout
    assert "was not paused" in relay_cli("resume", "--key", "k1").stdout
    status = json.loads(relay_cli("status", "--json").stdout)
    assert [p["kind"] for p in status["pauses"]] == ["database"]
