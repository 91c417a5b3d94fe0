"""`relay migrate` under a transaction that holds the outbox: it waits without holding writers
up, and past its bound gives up cleanly, naming who held the lock."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from relay.store.engine import create_engine
from relay.store.schema import upgrade
from tests.support import databases

RELAY = [sys.executable, "-c", "from relay.commands import main; raise SystemExit(main())"]


@pytest.fixture(params=["postgresql", "mysql"])
def url_at_previous_release(
    request: pytest.FixtureRequest, backend_pool: databases.BackendPool
) -> Iterator[str]:
    """A database at 0014 (releases 1.0 and 1.1), one revision behind head."""
    with backend_pool.database(request.param, migrated=False) as url:
        upgrade.upgrade(url, "0014")
        yield url


def _migrate(url: str, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RELAY_DATABASE_URL": url, "RELAY_BROKER_URL": "memory://"}
    return subprocess.run(
        [*RELAY, "migrate", *flags], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.timeout(180)
def test_migrate_gives_up_past_its_bound_and_carries_on_when_run_again(
    url_at_previous_release: str,
) -> None:
    """A report holds the outbox open: `relay migrate --max-lock-wait 1` gives up naming the
    lock's holder, leaves nothing of the revision behind (still at 0014, no new table), and a
    plain write goes through meanwhile; once the report ends, running it again reaches head."""
    url = url_at_previous_release
    engine = create_engine(url)
    try:
        with engine.connect() as report:
            report.begin()
            report.execute(sa.text("SELECT count(*) FROM outbox")).scalar_one()
            done = _migrate(url, "--max-lock-wait", "1")
            # The migration is over and held nothing: a writer is not queued behind it.
            started = time.monotonic()
            with engine.begin() as writer:
                writer.execute(
                    sa.text("INSERT INTO outbox (event_type, payload) VALUES ('t', '{}')")
                )
            assert time.monotonic() - started < 5
            report.rollback()
        assert done.returncode == 1, done.stdout + done.stderr
        assert "gave up after" in done.stderr, done.stderr
        assert "--max-lock-wait" in done.stderr
        assert upgrade.current(url) == "0014"
        assert "relay_pauses" not in sa.inspect(engine).get_table_names()
        again = _migrate(url)
        assert again.returncode == 0, again.stdout + again.stderr
        assert upgrade.current(url) == upgrade.head()
        upgrade.check(url)
    finally:
        engine.dispose()
