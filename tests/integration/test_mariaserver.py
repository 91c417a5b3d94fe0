"""The retention benchmark's own MariaDB server (tools/mariaserver.py): it starts with the
settings it is given, takes a migrated outbox, and leaves nothing behind, not even after a
failure. Skipped when MariaDB's server is not installed (failed under ``CI``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from relay.store.schema import upgrade
from tests.support import services
from tools import mariaserver


class TestFailedError(Exception):
    """Stands for a benchmark failing while its server runs."""

    __test__ = False


def _use_then_fail(seen: list[mariaserver.MariaServer]) -> None:
    settings = {**mariaserver.DEFAULTS, "innodb-buffer-pool-size": "64M"}
    with mariaserver.server(settings) as server:
        seen.append(server)
        shown = server.settings("innodb_buffer_pool_size", "character_set_server")
        assert shown == {
            "innodb_buffer_pool_size": str(64 * 2**20),
            "character_set_server": "utf8mb4",
        }
        admin = sa.create_engine(server.admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text("CREATE DATABASE relay_check"))
        admin.dispose()
        url = sa.make_url(server.admin_url).set(database="relay_check")
        upgrade.upgrade(url.render_as_string(False))
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM outbox")).scalar_one() == 0
        engine.dispose()
        raise TestFailedError


def test_a_throwaway_mariadb_runs_its_settings_and_is_removed_after_a_failure() -> None:
    if mariaserver.find_binaries() is None:
        message = "MariaDB's server is not installed (apt-get install mariadb-server)"
        if services.IN_CI:
            pytest.fail(f"{message}; CI requires it", pytrace=False)
        pytest.skip(message)
    seen: list[mariaserver.MariaServer] = []
    with pytest.raises(TestFailedError):
        _use_then_fail(seen)
    [server] = seen
    assert server.process is not None
    assert server.process.poll() is not None, "the server still runs"
    assert not Path(server.root).exists(), "its directory was left behind"
