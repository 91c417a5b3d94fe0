"""A PostgreSQL standby (read-only, in recovery) met by the relay, as after a failover whose DNS
name or virtual IP still points at the old primary: a connection fault for the store and the
wake-up's reader, never a database error or grant advice; a multi-host URL with
``target_session_attrs=read-write`` finds the primary whatever the hosts' order. The same for a
read-only MariaDB server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from relay.config import timing
from relay.exceptions import DatabaseUnavailable
from relay.store.dispatch_path.sequence import SequenceReader
from relay.store.dispatch_path.store import DispatchStore
from relay.store.engine import create_engine
from relay.store.schema import upgrade
from tests.support import services
from tests.support.pgserver import in_recovery, throwaway_pair
from tools import mariaserver

DEADLINES = timing.database_deadlines(3.0)


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[str, str]]:
    """URLs of a migrated outbox database on a primary and on its synchronous standby."""
    with throwaway_pair() as (primary, standby):
        url = primary.create_database("relay")
        upgrade.upgrade(url)
        yield url, standby.url_for("relay")


def test_a_standby_is_a_connection_fault_for_the_store_and_the_watcher(
    pair: tuple[str, str],
) -> None:
    """Claiming on a standby (SQLSTATE 25006) and taking a transaction id there ("cannot
    execute pg_current_xact_id() during recovery") are DatabaseUnavailable: retried with
    backoff by their callers, no exit, no advice to grant anything."""
    _, standby_url = pair
    assert in_recovery(standby_url)
    store = DispatchStore.from_url(standby_url, deadlines=DEADLINES, abandon_calls=True)
    reader = SequenceReader(store)
    try:
        with pytest.raises(DatabaseUnavailable) as claimed:
            store.claim("w", 10, 3.0)
        sequence = reader.sequence()
        assert sequence is not None
        reader.look(sequence)  # reading the sequence is fine on a standby
        with pytest.raises(DatabaseUnavailable) as horizon:
            reader.horizon()
    finally:
        reader.close()
        store.dispose()
    assert claimed.value.retryable
    assert "read-only" in str(claimed.value)
    assert horizon.value.retryable
    assert "during recovery" in str(horizon.value)


@pytest.mark.parametrize("order", ["standby first", "primary first"])
def test_a_multi_host_url_with_read_write_finds_the_primary(
    pair: tuple[str, str], order: str
) -> None:
    """``?host=standby:port&host=primary:port&target_session_attrs=read-write``: libpq skips
    the standby, so a relay given every node's address reaches whichever is primary."""
    primary_url, standby_url = (sa.make_url(u) for u in pair)
    nodes = [f"{u.host}:{u.port}" for u in (standby_url, primary_url)]
    if order == "primary first":
        nodes.reverse()
    url = primary_url.set(host=None, port=None).update_query_dict(
        {"host": nodes, "target_session_attrs": "read-write"}
    )
    engine = create_engine(url.render_as_string(False), deadlines=DEADLINES)
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT pg_is_in_recovery()")).scalar() is False
    finally:
        engine.dispose()


@pytest.mark.timeout(120)
def test_a_read_only_mariadb_server_is_a_connection_fault() -> None:
    """MariaDB set ``read_only`` (a replica, or a primary demoted by the failover tooling):
    the relay's role is refused with error 1290, which the store takes for a connection fault
    (DatabaseUnavailable, retryable), and it works again once the server takes writes. On a
    throw-away server: the shared one is never reconfigured."""
    if mariaserver.find_binaries() is None:
        message = "MariaDB's server is not installed (apt-get install mariadb-server)"
        if services.IN_CI:
            pytest.fail(f"{message}; CI requires it", pytrace=False)
        pytest.skip(message)
    with mariaserver.server() as server:
        admin = sa.create_engine(server.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(sa.text("CREATE DATABASE relay"))
                # Not root: a role with the SUPER or READ ONLY ADMIN privilege may still write.
                conn.execute(sa.text("CREATE USER relay@'%'"))
                conn.execute(sa.text("GRANT ALL ON relay.* TO relay@'%'"))
            url = sa.make_url(server.admin_url).set(database="relay")
            upgrade.upgrade(url.render_as_string(False))
            relay_url = url.set(username="relay").render_as_string(False)
            store = DispatchStore.from_url(relay_url, deadlines=DEADLINES, abandon_calls=True)
            try:
                assert store.claim("w", 10, 3.0) == []
                with admin.connect() as conn:
                    conn.execute(sa.text("SET GLOBAL read_only = 1"))
                with pytest.raises(DatabaseUnavailable) as refused:
                    store.claim("w", 10, 3.0)
                with admin.connect() as conn:
                    conn.execute(sa.text("SET GLOBAL read_only = 0"))
                assert store.claim("w", 10, 3.0) == []
            finally:
                store.dispose()
        finally:
            admin.dispose()
    assert refused.value.retryable
    assert "1290" in str(refused.value.__cause__)
