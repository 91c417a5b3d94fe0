"""relay.testing.outbox on a SQLite file: only the test's events, none of a rollback, the
order-only match, and a drain that relays them all."""

from __future__ import annotations

from pathlib import Path

import pytest

import relay
from relay.testing.outbox import TestOutbox


def test_the_outbox_shows_the_tests_committed_events_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'outbox.sqlite3'}"
    relay.migrate(url)
    engine = relay.create_engine(url)
    try:
        with engine.begin() as conn:
            relay.enqueue(conn, "before.test", {})
        outbox = TestOutbox.starting_now(engine)
        with engine.begin() as conn:
            relay.enqueue(conn, "a.one", {"n": 1})
            relay.enqueue(conn, "b.two", {"n": 2})
        with engine.connect() as conn, conn.begin() as tx:
            relay.enqueue(conn, "rolled.back", {})
            tx.rollback()
        outbox.assert_committed(("a.one", {"n": 1}), "b.two")
        outbox.assert_committed("b.two", exactly=False)
        assert [e.event_type for e in outbox.committed("a.*")] == ["a.one"]
        with pytest.raises(AssertionError, match=r"these events, in this order"):
            outbox.assert_committed("b.two", "a.one", exactly=False)
        published = outbox.drain()  # every pending row of the outbox, as the relay would
        assert [m.routing_key for m in published] == ["before.test", "a.one", "b.two"]
        assert outbox.pending() == []
        assert {e.status for e in outbox.committed()} == {"sent"}
    finally:
        engine.dispose()
