"""The database fault rule's pure parts: which driver errors are the connection's fault (by
code, never message), the deadlines derived from the lease, and the watchdog shutting the
socket of a call past its deadline (on a socketpair: no database)."""

from __future__ import annotations

import socket
import threading

import pytest
from sqlalchemy import exc as sa_exc

from relay.config import timing
from relay.exceptions import ConfigError
from relay.store import faults
from relay.store.engine import create_engine
from relay.store.watchdog import Watchdog


class _PgError(Exception):
    def __init__(self, sqlstate: str | None) -> None:
        super().__init__("message text that is never read")
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("error", "fault"),
    [
        (_PgError("25006"), True),  # read_only_sql_transaction: a standby, a demoted primary
        (_PgError("57P01"), True),  # admin_shutdown
        (_PgError("57P03"), True),  # cannot_connect_now: starting up, in recovery
        (_PgError("08006"), True),  # connection_failure (class 08)
        (_PgError("55000"), False),  # object_not_in_prerequisite_state: many meanings
        (_PgError("23505"), False),  # unique_violation: the statement's, not the connection's
        (_PgError("XX000"), False),
        (_PgError(None), False),
        (Exception(1290, "--read-only"), True),  # MySQL/MariaDB read-only server
        (Exception(1792, "read-only transaction"), True),
        (Exception(1836, "read-only mode"), True),
        (Exception(1062, "duplicate"), False),
        (Exception("read-only"), False),  # a message alone never decides
        (None, False),
    ],
)
def test_connection_faults_are_told_by_their_code(error: BaseException | None, fault: bool) -> None:
    """SQLSTATE or MySQL error number decides; the message is never read."""
    assert faults.is_connection_fault(error) is fault


def test_a_read_only_error_wrapped_by_sqlalchemy_is_unavailable() -> None:
    """SQLAlchemy's InternalError around SQLSTATE 25006 is the connection's fault; around
    another code it is a database error."""
    read_only = sa_exc.InternalError("SELECT", {}, _PgError("25006"))
    other = sa_exc.InternalError("SELECT", {}, _PgError("XX000"))
    assert faults.is_unavailable(read_only)
    assert not faults.is_unavailable(other)
    assert faults.is_unavailable(sa_exc.OperationalError("SELECT", {}, Exception("gone")))


@pytest.mark.parametrize(
    ("lease", "connect", "idle", "call"),
    [(30, 5, 3, 10.0), (3, 2, 1, 1.0), (1, 2, 1, 1.0), (120, 20, 12, 40.0)],
)
def test_deadlines_follow_the_lease_above_their_floors(
    lease: float, connect: int, idle: int, call: float
) -> None:
    """Connect a sixth (>= 2 s, whole seconds), keepalives after a tenth, a call a third."""
    d = timing.database_deadlines(lease)
    assert (d.connect_seconds, d.keepalive_idle_seconds, d.call_seconds) == (connect, idle, call)


class _Conn:
    """A DBAPI connection as the watchdog sees psycopg's: a ``fileno()``."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def fileno(self) -> int:
        return self._sock.fileno()


@pytest.mark.timeout(30)
def test_the_watchdog_shuts_the_socket_of_a_call_past_its_deadline() -> None:
    """A call blocked reading a peer that never answers returns once the watchdog fires; a
    call that ended in time is left alone."""
    dog = Watchdog(0.2)
    ours, peer = socket.socketpair()
    quick, quick_peer = socket.socketpair()
    got: list[bytes] = []
    try:
        with dog.guard():
            dog.watch(_Conn(quick))
        assert dog.abandoned == 0

        def call() -> None:
            with dog.guard():
                dog.watch(_Conn(ours))
                got.append(ours.recv(10))  # the peer never writes

        thread = threading.Thread(target=call)
        thread.start()
        thread.join(20)
        assert not thread.is_alive(), "the call was never abandoned"
        assert got == [b""]
        assert dog.abandoned == 1
        quick_peer.sendall(b"x")
        assert quick.recv(1) == b"x", "a call that ended in time lost its connection"
    finally:
        for s in (ours, peer, quick, quick_peer):
            s.close()


def test_a_host_list_with_ports_in_one_parameter_is_refused_with_the_form_that_works() -> None:
    """``?host=a:5432,b:5433`` would fail every connection with "invalid integer value";
    the relay refuses it at start, naming the variable and the spelling SQLAlchemy reads."""
    with pytest.raises(ConfigError, match=r"RELAY_DATABASE_URL=.*\?host=a:5432&host=b:5432"):
        create_engine("postgresql://u@/db?host=a:5432,b:5433&target_session_attrs=read-write")
    for fine in ("postgresql://u@/db?host=a:5432&host=b:5433", "postgresql://u@/db?host=a,b"):
        create_engine(fine).dispose()  # no connection is made
