"""relay.consume.inbox.claim: once per (consumer, message id), in the caller's transaction, on every
database; concurrent claims of one id wait for each other; retention purges by age."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from relay.consume import inbox
from relay.exceptions import EventError
from relay.store.schema.tables import inbox as inbox_table


def _rows(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(inbox_table)).scalar_one())


def test_first_claim_wins_and_a_rollback_forgets_it(engine: sa.Engine) -> None:
    """True the first time; False once committed; a rolled-back claim leaves nothing."""
    with engine.connect() as conn:
        with conn.begin() as tx:
            assert inbox.claim(conn, "billing", "41") is True
            tx.rollback()
        with conn.begin():
            assert inbox.claim(conn, "billing", "41") is True
            assert inbox.claim(conn, "billing", "41") is False  # same transaction, seen
        with conn.begin():
            assert inbox.claim(conn, "billing", "41") is False
            assert inbox.claim(conn, "shipping", "41") is True  # another consumer's own
    with Session(engine) as session, session.begin():
        assert inbox.claim(session, "billing", "42") is True
    assert _rows(engine) == 3


@pytest.mark.timeout(60)
@pytest.mark.parametrize("first_commits", [True, False])
def test_a_racing_claim_waits_for_the_first_then_answers(
    engine: sa.Engine, first_commits: bool
) -> None:
    """Two transactions claim one id: the second blocks until the first ends, then gets False
    if the first committed and True if it rolled back."""
    claimed_first = threading.Event()
    release_first = threading.Event()

    def first() -> None:
        with engine.connect() as conn:
            tx = conn.begin()
            assert inbox.claim(conn, "c", "m-1")
            claimed_first.set()
            assert release_first.wait(20)
            (tx.commit if first_commits else tx.rollback)()

    def second() -> bool:
        with engine.begin() as conn:
            return inbox.claim(conn, "c", "m-1")

    with ThreadPoolExecutor(2) as pool:
        a = pool.submit(first)
        assert claimed_first.wait(20)
        b = pool.submit(second)
        # The second is blocked behind the first's uncommitted row (or, on SQLite, its lock).
        assert not b.done()
        try:
            b.result(timeout=0.5)
        except TimeoutError:
            pass
        else:
            pytest.fail("the second claim did not wait for the first transaction")
        release_first.set()
        a.result(timeout=20)
        assert b.result(timeout=20) is (not first_commits)
    assert _rows(engine) == 1


def test_purge_deletes_only_rows_older_than_the_retention(engine: sa.Engine) -> None:
    """Rows received before the cut are deleted in batches; newer ones stay."""
    with engine.begin() as conn:
        for n in range(7):
            inbox.claim(conn, "c", f"old-{n}")
    with engine.begin() as conn:
        # Age them by a day, from the database's own timestamps.
        rows = conn.execute(sa.select(inbox_table.c.message_id, inbox_table.c.received_at)).all()
        for message_id, received_at in rows:
            conn.execute(
                sa.update(inbox_table)
                .where(inbox_table.c.message_id == message_id)
                .values(received_at=received_at - timedelta(days=1))
            )
        inbox.claim(conn, "c", "new")
    with engine.begin() as conn:
        assert inbox.purge(conn, 3600, batch_size=5) == 5
    with engine.begin() as conn:
        assert inbox.purge(conn, 3600, batch_size=5) == 2
    with engine.begin() as conn:
        assert inbox.purge(conn, 3600, batch_size=5) == 0
        left = conn.execute(sa.select(inbox_table.c.message_id)).scalars().all()
    assert left == ["new"]


def test_bad_arguments_are_refused_naming_them(engine: sa.Engine) -> None:
    """No transaction, an empty consumer, an id over 255 bytes: EventError naming the field."""
    with engine.connect() as conn:
        with pytest.raises(EventError, match="session_or_connection"):
            inbox.claim(conn, "c", "1")
        with conn.begin():
            with pytest.raises(EventError, match="consumer"):
                inbox.claim(conn, "", "1")
            with pytest.raises(EventError, match="message_id"):
                inbox.claim(conn, "c", "x" * 256)
