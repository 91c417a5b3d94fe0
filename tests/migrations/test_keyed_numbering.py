"""Migration 0012 on a database with keyed rows: numbers taken before it stay, plain-SQL keyed
rows are numbered after it, and its downgrade takes the numbering away again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from bench import numbering
from relay.store.engine import create_engine
from relay.store.schema import upgrade
from tests.support import databases

PLAIN = "INSERT INTO outbox (event_type, payload, ordering_key) VALUES (:t, '{}', :key)"


@pytest.fixture(params=databases.ENABLED)
def url_at_0011(
    request: pytest.FixtureRequest, backend_pool: databases.BackendPool
) -> Iterator[str]:
    """A database of each enabled kind migrated to revision 0011 only."""
    with backend_pool.database(request.param, migrated=False) as url:
        upgrade.upgrade(url, "0011")
        yield url


def _numbers(engine: sa.Engine) -> list[tuple[str, str | None, int | None]]:
    with engine.connect() as conn:
        query = sa.text("SELECT event_type, ordering_key, seq FROM outbox ORDER BY id")
        return [tuple(r) for r in conn.execute(query)]  # type: ignore[misc]


def test_rows_keep_their_numbers_and_plain_sql_is_numbered_after_the_upgrade(
    url_at_0011: str,
) -> None:
    """Under 0011, a row numbered by the explicit statements and a plain keyed row (no number);
    after 0012 both are as they were and a plain keyed row takes the key's next number; after
    the downgrade a plain keyed row is unnumbered again, and upgrading once more works."""
    engine = create_engine(url_at_0011)
    try:
        with engine.begin() as conn:
            seq = numbering.next_seq(conn, "k")
            numbering.insert_numbered(
                conn,
                {
                    "event_type": "old",
                    "payload": {},
                    "headers": None,
                    "ordering_key": "k",
                    "seq": seq,
                },
            )
            conn.execute(sa.text(PLAIN), {"t": "old.plain", "key": "k"})
        upgrade.upgrade(url_at_0011)
        upgrade.check(url_at_0011)
        with engine.begin() as conn:
            conn.execute(sa.text(PLAIN), {"t": "new.plain", "key": "k"})
            conn.execute(sa.text(PLAIN), {"t": "new.other", "key": "j"})
        assert _numbers(engine) == [
            ("old", "k", 1),
            ("old.plain", "k", None),
            ("new.plain", "k", 2),
            ("new.other", "j", 1),
        ]
        with engine.connect() as conn:
            progress = conn.execute(
                sa.text("SELECT ordering_key, sent_seq FROM outbox_progress ORDER BY 1")
            ).all()
        assert [tuple(r) for r in progress] == [("j", 0), ("k", 0)]

        upgrade.downgrade(url_at_0011, "0011")
        with engine.begin() as conn:
            conn.execute(sa.text(PLAIN), {"t": "down.plain", "key": "k"})
        assert _numbers(engine)[-1] == ("down.plain", "k", None)
        upgrade.upgrade(url_at_0011)
        with engine.begin() as conn:
            conn.execute(sa.text(PLAIN), {"t": "up.again", "key": "k"})
        assert _numbers(engine)[-1] == ("up.again", "k", 3)
    finally:
        engine.dispose()
