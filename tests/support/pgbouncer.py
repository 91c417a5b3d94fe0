"""A throwaway PgBouncer in transaction pooling mode in front of the test PostgreSQL server.

Debian's ``/usr/sbin/pgbouncer`` is started per test module on a free loopback port with a
config written into a temporary directory (never Debian's own service, never a change to the
shared server), and always stopped. PgBouncer refuses to run as root, so a root test run
starts it as the ``postgres`` user (``Popen(user=...)``: the pid is PgBouncer's own). Missing
binary: the test skips locally and fails in CI.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support import services

BINARY = "/usr/sbin/pgbouncer"
#: The unprivileged user a root test run starts PgBouncer as.
RUN_AS = "postgres"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(port: int, work: Path, users: list[str]) -> str:
    server = sa.make_url(services.PG_ADMIN_URL)
    (work / "users.txt").write_text("".join(f'"{u}" ""\n' for u in users))
    return f"""\
[databases]
* = host={server.host or "127.0.0.1"} port={server.port or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {work}/users.txt
pool_mode = transaction
default_pool_size = 10
max_client_conn = 500
ignore_startup_parameters = extra_float_digits,options
logfile = {work}/pgbouncer.log
pidfile = {work}/pgbouncer.pid
"""


class PgBouncer:
    """A running PgBouncer: :meth:`url` turns a direct PostgreSQL URL into a pooled one."""

    def __init__(self, port: int, work: Path, proc: subprocess.Popen[bytes]) -> None:
        self.port, self.work, self.proc = port, work, proc

    def url(self, direct_url: str) -> str:
        """``direct_url`` (a database on the test server) through this pooler."""
        return sa.make_url(direct_url).set(host="127.0.0.1", port=self.port).render_as_string(False)

    @property
    def log(self) -> str:
        path = self.work / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""


@contextmanager
def running(users: tuple[str, ...] = ("postgres",)) -> Iterator[PgBouncer]:
    """Start PgBouncer (transaction mode), yield it, stop it whatever happened."""
    if not os.access(BINARY, os.X_OK):
        message = f"PgBouncer is not installed at {BINARY} (apt-get install pgbouncer)"
        if services.IN_CI:
            pytest.fail(f"{message}; CI requires it", pytrace=False)
        pytest.skip(message)
    services.require("PostgreSQL", services.PG_ADMIN_URL)
    work = Path(tempfile.mkdtemp(prefix="relay-pgbouncer-"))
    port = _free_port()
    (work / "pgbouncer.ini").write_text(_config(port, work, list(users)))
    as_user: dict[str, str] = {}
    if os.geteuid() == 0:
        for path in (work, *work.iterdir()):
            shutil.chown(path, user=RUN_AS)
        as_user = {"user": RUN_AS, "group": RUN_AS}
    proc = subprocess.Popen(
        [BINARY, str(work / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        **as_user,  # type: ignore[arg-type]  # Popen's user/group keywords, typed per overload
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                    raise RuntimeError(f"pgbouncer did not start: {err}") from None
                time.sleep(0.05)
        yield PgBouncer(port, work, proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # immediate shutdown: clients may still be connected
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if proc.stderr is not None:
            proc.stderr.close()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def pgbouncer() -> Iterator[PgBouncer]:
    """One throwaway PgBouncer (transaction mode) for a test module."""
    with running() as bouncer:
        yield bouncer
