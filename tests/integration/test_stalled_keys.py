"""Stalled ordering keys (issue 37) on every database: a key whose head is failed, a key whose
next number no row has (a row deleted, a row numbered by hand), a key whose head is sent while
its progress is behind; healthy keys beside them are never reported. Seen through `relay
doctor`, `relay status` (text and `--json`), the console's `/api/status` and overview page and
the `relay_stalled_keys` gauge; each fix the report gives lets its key go on."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.commands.doctor.keys import stalled_keys
from relay.config import Settings
from relay.observe.gauges import OutboxCollector
from relay.records import Stall
from relay.store.dialects import for_name
from relay.store.dialects.keys import KeyStatements
from relay.store.dispatch_path.store import DispatchStore
from relay.store.operations.filters import EventFilter
from relay.store.operations.store import OperationsStore
from relay.store.schema.tables import outbox, outbox_progress
from tests.integration.test_claim_plan import _generic_plan
from tests.integration.test_doctor import DEAD_BROKER, doctor
from tests.integration.test_doctor import relay as run_relay
from tests.support.console import bearer, client, signed_in

pytestmark = pytest.mark.timeout(120)

#: The stalled keys the scene below makes, and why each is stalled.
STALLED = {"bad": Stall.FAILED, "gap": Stall.MISSING, "hand": Stall.MISSING, "behind": Stall.SENT}


def _enqueue(engine: sa.Engine, key: str, n: int) -> list[int]:
    with Session(engine) as session, session.begin():
        return [
            relay.enqueue(session, "order.changed", {"i": i}, ordering_key=key) for i in range(n)
        ]


def _set(engine: sa.Engine, key: str, seq: int, **values: Any) -> None:
    with engine.begin() as conn:
        where = sa.and_(outbox.c.ordering_key == key, outbox.c.seq == seq)
        conn.execute(sa.update(outbox).where(where).values(**values))


def _progress(engine: sa.Engine, key: str, sent_seq: int) -> None:
    with engine.begin() as conn:
        stmt = sa.update(outbox_progress).where(outbox_progress.c.ordering_key == key)
        conn.execute(stmt.values(sent_seq=sent_seq))


def _scene(engine: sa.Engine) -> None:
    """Two healthy keys and four stalled ones, each in the state the relay or a hand left."""
    _enqueue(engine, "ok", 3)  # healthy: its head is pending
    _enqueue(engine, "done", 2)  # healthy: everything sent, progress at its last number
    _set(engine, "done", 1, status="sent")
    _set(engine, "done", 2, status="sent")
    _progress(engine, "done", 2)
    _enqueue(engine, "bad", 2)  # its head is a dead letter
    _set(engine, "bad", 1, status="failed", attempt=10, last_error="Unroutable: no queue bound")
    _enqueue(engine, "gap", 3)  # its head deleted by hand
    with engine.begin() as conn:
        conn.execute(sa.delete(outbox).where(outbox.c.ordering_key == "gap", outbox.c.seq == 1))
    _enqueue(engine, "hand", 1)  # number 1 sent, then a row numbered 3 by hand
    _set(engine, "hand", 1, status="sent")
    _progress(engine, "hand", 1)
    with engine.begin() as conn:
        conn.execute(
            sa.insert(outbox).values(
                event_type="order.changed", payload={}, ordering_key="hand", seq=3
            )
        )
    _enqueue(engine, "behind", 2)  # its head marked sent by hand, the progress left at 0
    _set(engine, "behind", 1, status="sent")


def test_stalled_keys_are_named_with_why_and_a_fix_that_works(
    engine: sa.Engine, db_url: str
) -> None:
    """Each stalled key is found with its reason (healthy keys never), and applying the fix
    each one names lets the key's rows be claimed again."""
    _scene(engine)
    ops = OperationsStore(engine)
    found = {k.key: k for k in ops.stalled_keys(100)}
    assert {k: s.stall for k, s in found.items()} == STALLED
    assert "failed (Unroutable: no queue bound)" in found["bad"].why
    assert "relay failed retry --key bad" in found["bad"].fix
    assert "relay failed purge --key bad" in found["bad"].fix
    assert (found["gap"].head_seq, found["gap"].resumes_at) == (1, 2)
    assert (found["hand"].head_seq, found["hand"].resumes_at) == (2, 3)
    assert "no row has number 2" in found["hand"].why
    assert found["behind"].head_seq == 1

    report = ops.status()
    assert report.stalled_keys == 4
    assert [k.key for k in report.stalled_sample] == sorted(STALLED)

    ops.purge_failed(EventFilter(key="bad"))  # the fix the report names for a failed head
    with engine.begin() as conn:
        for key in ("gap", "hand", "behind"):  # the SQL the report names for the others
            conn.execute(sa.text(found[key].fix.split(": ", 1)[-1]))
    assert ops.stalled_keys(100) == []
    store, heads = DispatchStore(engine), set()
    for _ in range(10):  # a claim leases half the keys it finds: claim until none is left
        claimed = store.claim("w", 100, 30.0)
        heads |= {(e.ordering_key, e.seq) for e in claimed}
        if not claimed:
            break
    assert {("ok", 1), ("bad", 2), ("gap", 2), ("hand", 3), ("behind", 2)} <= heads
    ops.dispose()


def test_doctor_status_console_and_gauge_report_stalled_keys(
    engine: sa.Engine, db_url: str
) -> None:
    """`relay doctor` warns naming the keys and their fixes, `relay status` (text and JSON)
    and the console count and name them, the gauge counts them; a healthy key is never
    named."""
    _scene(engine)
    env = {"RELAY_DATABASE_URL": db_url, "RELAY_EVENTS_URL": DEAD_BROKER}
    _, checks = doctor(env)
    check = checks["ordering keys"]
    assert check["status"] == "warn"
    for key in STALLED:
        assert f"'{key}'" in check["detail"]
    assert "'ok'" not in check["detail"]
    assert "'done'" not in check["detail"]
    assert "relay failed purge --key bad" in check["fix"]
    assert "UPDATE outbox_progress SET sent_seq = 1 WHERE ordering_key = 'gap'" in check["fix"]

    out = run_relay({"RELAY_DATABASE_URL": db_url}, "status", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["stalled_keys"] == 4
    assert {k["key"]: k["stall"] for k in report["stalled_sample"]} == STALLED
    text = run_relay({"RELAY_DATABASE_URL": db_url}, "status").stdout
    assert "stalled keys" in text
    assert "relay failed retry --key bad" in text

    with client(engine) as c:
        api = c.get("/api/status", headers=bearer()).json()
        assert (api["stalled_keys"], api["stalled_sample"]) == (4, report["stalled_sample"])
        signed_in(c)
        page = c.get("/").text
    assert 'id="stalled-keys">4<' in page
    assert "no row has number 2" in page

    ops = OperationsStore(engine)
    collector = OutboxCollector(ops, min_interval=0)
    gauge = next(m for m in collector.collect() if m.name == "relay_stalled_keys")
    assert [s.value for s in gauge.samples] == [4]
    ops.dispose()


def test_a_deployment_without_stalled_keys_passes(engine: sa.Engine, db_url: str) -> None:
    """Keys that move (pending heads, all sent) and unordered rows: the check passes."""
    _enqueue(engine, "ok", 2)
    with Session(engine) as session, session.begin():
        relay.enqueue(session, "order.changed", {})
    check = stalled_keys(Settings(database_url=db_url))
    assert check.status == "pass", check
    assert OperationsStore(engine).status().stalled_keys == 0


def _history(engine: sa.Engine, keys: int, sent: int) -> None:
    """``keys`` keys with ``sent`` sent rows and one pending row each (progress at ``sent``),
    and a key whose head failed."""

    def row(key: str, seq: int, status: str) -> dict[str, Any]:
        return {"event_type": "t", "payload": {}, "ordering_key": key, "seq": seq, "status": status}

    rows = [row(f"k{k}", n, "sent") for k in range(keys) for n in range(1, sent + 1)]
    rows += [row(f"k{k}", sent + 1, "pending") for k in range(keys)]
    rows.append(row("f", 1, "failed"))
    with engine.begin() as conn:
        for start in range(0, len(rows), 5000):
            conn.execute(sa.insert(outbox), rows[start : start + 5000])
        conn.execute(sa.delete(outbox_progress))
        progress = [{"ordering_key": f"k{k}", "sent_seq": sent} for k in range(keys)]
        conn.execute(sa.insert(outbox_progress), [*progress, {"ordering_key": "f", "sent_seq": 0}])


def test_finding_stalled_keys_reads_one_index_entry_per_probe_not_the_history(
    engine: sa.Engine,
) -> None:
    """Keys with a long sent history: the statement reads each key's head and highest number
    through uq_outbox_ordering_key_seq, never the table nor the sent rows below the progress
    (PostgreSQL: index probes in its plan; MariaDB: one row read per key's probe)."""
    name = engine.dialect.name
    if name == "sqlite":
        pytest.skip("the plans of PostgreSQL and MariaDB are the ones that could read history")
    _history(engine, keys=10, sent=2000)
    ops = OperationsStore(engine)
    assert [(k.key, k.stall) for k in ops.stalled_keys(10)] == [("f", Stall.FAILED)]
    ops.dispose()
    stmt = KeyStatements(for_name(name)).stalled_keys(10)
    if name == "postgresql":
        with engine.begin() as conn:
            conn.execute(sa.text("ANALYZE outbox"))
        for mode in ("force_custom_plan", "force_generic_plan"):
            plan = _generic_plan(engine, stmt, mode=mode)
            assert "uq_outbox_ordering_key_seq" in plan, plan
            assert not re.search(r"Seq Scan on outbox\b(?!_)", plan), plan
            assert "Bitmap" not in plan, plan
        return
    sql = str(stmt.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        analyzed = [r._mapping for r in conn.execute(sa.text("ANALYZE " + sql))]
    probes = [r for r in analyzed if r["table"] in ("outbox", "h")]
    assert probes, analyzed
    for probe in probes:
        assert probe["key"] == "uq_outbox_ordering_key_seq", analyzed
        assert float(probe["r_rows"] or 0) <= 2, analyzed  # not the 2,000 sent rows of a key
