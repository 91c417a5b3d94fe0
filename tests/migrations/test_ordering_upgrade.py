"""Migration 0002 on a database with rows in flight: every existing row stays valid."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from relay.store.dispatch_path.store import DispatchStore
from relay.store.engine import create_engine
from relay.store.schema import upgrade
from tests.support import databases


@pytest.fixture(params=databases.ENABLED)
def url_at_0001(
    request: pytest.FixtureRequest, backend_pool: databases.BackendPool
) -> Iterator[str]:
    """A database of each enabled kind migrated to revision 0001 only."""
    with backend_pool.database(request.param, migrated=False) as url:
        upgrade.upgrade(url, "0001")
        yield url


def test_rows_written_before_0002_are_relayed_after_it(url_at_0001: str) -> None:
    """Keyed and unkeyed rows written under 0001 are claimable after upgrading to head: keyed
    ones without a sequence number, as unordered rows; new keyed rows start at number 1."""
    engine = create_engine(url_at_0001)
    try:
        with engine.begin() as conn:
            for key in ("k", "k", None):
                conn.execute(
                    sa.text(
                        "INSERT INTO outbox (event_type, payload, ordering_key)"
                        " VALUES ('old', '{}', :key)"
                    ),
                    {"key": key},
                )
        upgrade.upgrade(url_at_0001)
        upgrade.check(url_at_0001)
        claimed = DispatchStore(engine).claim("w", 100, lease_seconds=60)
        assert sorted((e.ordering_key or "", e.seq) for e in claimed) == [
            ("", None),
            ("k", None),
            ("k", None),
        ]
    finally:
        engine.dispose()
