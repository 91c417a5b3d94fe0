"""The store verbs the Celery fleet relies on: a bounded backlog count, an exclusive purge."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from relay.store.dispatch_path.store import DispatchStore
from relay.store.operations.store import PURGE_LOCK_KEY, OperationsStore
from relay.store.schema.tables import outbox
from tests.support.celery_fleet import insert_rows


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[DispatchStore]:
    store = DispatchStore.from_url(pg_url)
    yield store
    store.dispose()


def test_backlog_counts_only_claimable_rows_and_stops_at_the_limit(pg_store: DispatchStore) -> None:
    """backlog() counts due pending rows, not future retries nor sent rows, and never more
    than its limit."""
    engine = pg_store.engine
    due = insert_rows(engine, 30)
    later, done = insert_rows(engine, 5), insert_rows(engine, 3)
    with engine.begin() as conn:
        conn.execute(
            sa.update(outbox)
            .where(outbox.c.id.in_(later))
            .values(next_retry_at=sa.func.now() + sa.text("interval '1 hour'"))
        )
        conn.execute(sa.update(outbox).where(outbox.c.id.in_(done)).values(status="sent"))
    assert pg_store.backlog(100) == len(due)
    assert pg_store.backlog(10) == 10


def test_exclusive_purge_stands_aside_while_another_purge_holds_the_lock(
    pg_store: DispatchStore,
) -> None:
    """An exclusive purge deletes nothing while another transaction holds the purge lock, and
    everything past the retention once it is free."""
    engine = pg_store.engine
    ids = insert_rows(engine, 25)
    with engine.begin() as conn:
        conn.execute(
            sa.update(outbox)
            .where(outbox.c.id.in_(ids))
            .values(status="sent", sent_at=sa.func.now() - sa.text("interval '1 day'"))
        )
    with engine.connect() as holder:
        holder.execute(sa.select(sa.func.pg_advisory_xact_lock(PURGE_LOCK_KEY)))
        assert OperationsStore(engine).purge_sent(3600, batch_size=10, exclusive=True) == 0
        holder.rollback()
    assert OperationsStore(engine).purge_sent(3600, batch_size=10, exclusive=True) == len(ids)
