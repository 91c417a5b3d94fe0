"""relay.store.dispatch_path.store.DispatchStore against a simple model, on real PostgreSQL
(hypothesis stateful testing).

Random interleavings of enqueue, claims by several workers, publish outcomes (sent, reschedule,
bury, release), lease renewal, lease expiry and reclaim. After every step the table must equal
the model: no row lost, a row marked sent only by its lease holder (and only once), and every
status change one a row's life allows (``relay.records.Status``): pending -> processing (a
claim) -> sent, back to pending (reschedule, release) or failed (bury); an expired lease's row
claimed again.
"""

from __future__ import annotations

from dataclasses import dataclass

import hypothesis.strategies as st
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy.orm import Session

import relay
from relay.records import Buried, ClaimedEvent, Rescheduled
from relay.store.dispatch_path.store import DispatchStore
from relay.store.engine import create_engine
from relay.store.schema.tables import outbox

WORKERS = ("w1", "w2", "w3")
LEASE = 300.0  # never expires by itself during a run: expiry is a rule of its own
OUTCOMES = ("sent", "reschedule", "bury", "release")

#: Status changes a row may make (``relay.records.Status``), without an operator's retry
#: (failed -> pending), which the model omits.
LEGAL = {
    ("pending", "processing"),  # claim
    ("processing", "processing"),  # reclaim of an expired lease
    ("processing", "sent"),
    ("processing", "pending"),  # reschedule, release
    ("processing", "failed"),
}


@dataclass
class ModelRow:
    status: str = "pending"
    attempt: int = 0
    locked_by: str | None = None
    expired: bool = False

    def held_by(self, worker: str, event: ClaimedEvent) -> bool:
        return (self.status, self.locked_by, self.attempt) == ("processing", worker, event.attempt)


class StoreModel(RuleBasedStateMachine):
    """The outbox as a dict of rows; every DispatchStore verb is predicted, then checked."""

    url = ""

    def __init__(self) -> None:
        super().__init__()
        self.engine = create_engine(self.url)
        self.store = DispatchStore(self.engine)
        with self.engine.begin() as conn:
            conn.execute(sa.text("TRUNCATE outbox RESTART IDENTITY"))
        self.model: dict[int, ModelRow] = {}
        self.batches: list[tuple[str, list[ClaimedEvent]]] = []
        self.times_sent: dict[int, int] = {}
        self.snapshot: dict[int, tuple[str, int, str | None]] = {}

    def teardown(self) -> None:
        self.engine.dispose()

    # -- rules -----------------------------------------------------------------------------
    @rule(n=st.integers(1, 6))
    def enqueue(self, n: int) -> None:
        with Session(self.engine) as session, session.begin():
            ids = [relay.enqueue(session, "model.event", {"i": i}) for i in range(n)]
        for i in ids:
            assert i not in self.model
            self.model[i] = ModelRow()

    @rule(worker=st.sampled_from(WORKERS), limit=st.integers(1, 8))
    def claim(self, worker: str, limit: int) -> None:
        claimable = sorted(
            i
            for i, r in self.model.items()
            if r.status == "pending" or (r.status == "processing" and r.expired)
        )
        events = self.store.claim(worker, limit, LEASE)
        assert [e.id for e in events] == claimable[:limit]
        for e in events:
            row = self.model[e.id]
            row.status, row.attempt, row.locked_by, row.expired = (
                "processing",
                row.attempt + 1,
                worker,
                False,
            )
            assert e.attempt == row.attempt
        if events:
            self.batches.append((worker, events))

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        """A worker reports a batch it claimed (maybe long ago, maybe lost) with mixed outcomes."""
        worker, events = self.batches.pop(data.draw(st.integers(0, len(self.batches) - 1)))
        outcome = {e.id: data.draw(st.sampled_from(OUTCOMES)) for e in events}
        by_kind = {k: [e for e in events if outcome[e.id] == k] for k in OUTCOMES}
        held = {e.id for e in events if self.model[e.id].held_by(worker, e)}

        done = self.store.complete(
            worker,
            sent=by_kind["sent"],
            rescheduled=[Rescheduled(e, 0.0, "nack") for e in by_kind["reschedule"]],
            buried=[Buried(e, "poison") for e in by_kind["bury"]],
        )
        released = self.store.release(worker, by_kind["release"], 0.0, "broker down")

        def expected(kind: str) -> int:
            return sum(1 for e in by_kind[kind] if e.id in held)

        assert (done.sent, done.rescheduled, done.buried, released) == tuple(
            expected(k) for k in OUTCOMES
        ), "a completion crossed the fence (or a holder's was refused)"
        assert done.lost == len(events) - len(by_kind["release"]) - (
            done.sent + done.rescheduled + done.buried
        )
        for e in events:
            if e.id not in held:
                continue
            row = self.model[e.id]
            kind = outcome[e.id]
            if kind == "sent":
                row.status = "sent"
                self.times_sent[e.id] = self.times_sent.get(e.id, 0) + 1
            elif kind == "bury":
                row.status = "failed"
            else:
                row.status, row.locked_by = "pending", None
                if kind == "release":
                    row.attempt -= 1

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        worker, events = data.draw(st.sampled_from(self.batches))
        held = [e for e in events if self.model[e.id].held_by(worker, e)]
        assert self.store.renew(worker, events, LEASE) == len(held)
        for e in held:
            self.model[e.id].expired = False

    @rule()
    def expire_leases(self) -> None:
        """Every lease runs out (moved into the past in database time)."""
        with self.engine.begin() as conn:
            conn.execute(
                sa.update(outbox)
                .where(outbox.c.status == "processing")
                .values(locked_until=sa.func.now() - sa.text("interval '1 second'"))
            )
        for row in self.model.values():
            if row.status == "processing":
                row.expired = True

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def table_equals_model(self) -> None:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(outbox.c.id, outbox.c.status, outbox.c.attempt, outbox.c.locked_by)
            ).all()
        now = {r.id: (r.status, r.attempt, r.locked_by) for r in rows}
        assert now.keys() == self.model.keys(), "a row was lost or appeared"
        for i, (status, attempt, locked_by) in now.items():
            m = self.model[i]
            assert (status, attempt) == (m.status, m.attempt), f"row {i}"
            if status in ("processing", "sent"):
                assert locked_by == m.locked_by, f"row {i} held by {locked_by}, not {m.locked_by}"
            before = self.snapshot.get(i)
            if before is not None and before[0] != status:
                assert (before[0], status) in LEGAL, f"row {i}: {before[0]} -> {status}"
            assert attempt >= 0
        self.snapshot = now

    @invariant()
    def sent_at_most_once(self) -> None:
        assert all(n == 1 for n in self.times_sent.values()), "a row was marked sent twice"


@pytest.mark.timeout(120)
def test_store_matches_the_model_under_random_interleavings(pg_url: str) -> None:
    """No lost row, no double send, no illegal transition, whatever the interleaving."""
    StoreModel.url = pg_url
    run_state_machine_as_test(
        StoreModel,
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
