"""A throw-away PostgreSQL server for the tests that stop or restart one.

The shared server on 5432 serves everyone on the machine (other checkouts, other suites); a fault
test that stops it breaks their work with "the database system is shutting down". Such a test
gets its own server instead: ``initdb`` into a temporary directory, ``pg_ctl start`` on a free
loopback port with its socket in that directory, removed (stopped, then deleted) at the end,
also when the test fails.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support import services

#: Where Debian puts each major version's server binaries; the newest one is used.
DEBIAN_BINDIRS = "/usr/lib/postgresql"
#: The OS user that runs the server when the tests run as root (initdb refuses root).
OS_USER = "postgres"


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: Debian's newest, else the PATH's."""
    root = Path(DEBIAN_BINDIRS)
    if root.is_dir():
        versions = sorted(
            (p for p in root.iterdir() if (p / "bin" / "initdb").is_file()),
            key=lambda p: int(p.name) if p.name.isdigit() else 0,
        )
        if versions:
            return versions[-1] / "bin"
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PgServer:
    """One PostgreSQL server in ``root``, listening on 127.0.0.1:``port`` only."""

    def __init__(self, bindir: Path, root: Path, port: int) -> None:
        self.bindir = bindir
        self.root = root
        self.port = port
        self.data = root / "data"
        self.log = root / "server.log"
        self.admin_url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"

    def _run(self, *args: str) -> None:
        command = [str(self.bindir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", OS_USER, "--", *command]
        # In the server's own directory: the postgres user may not enter the caller's.
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=self.root)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(
                f"{' '.join(args[:1])} failed ({done.returncode}): {done.stderr.strip()}\n{log}"
            )

    def init(self) -> None:
        """Create the cluster: superuser ``postgres``, trust on its own loopback port."""
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync",
            "-E", "UTF8", "--locale", "C",
        )  # fmt: skip

    def start(self) -> None:
        """Start and wait until it accepts connections."""
        options = (
            f"-c port={self.port} -c listen_addresses=127.0.0.1"
            f" -c unix_socket_directories={self.root}"
            # A throw-away server: durability buys nothing and costs the shared disk.
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop; ``fast`` cuts the sessions, as an operator's restart does."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def url_for(self, database: str) -> str:
        return sa.make_url(self.admin_url).set(database=database).render_as_string(False)

    def create_database(self, name: str) -> str:
        """An empty database ``name`` on this server; returns its URL."""
        admin = sa.create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        return self.url_for(name)


@contextmanager
def throwaway_server() -> Iterator[PgServer]:
    """A started :class:`PgServer`, stopped and deleted on exit whatever happened.

    Skips the test when no PostgreSQL binaries are installed (fails it under ``CI``)."""
    bindir = find_bindir()
    if bindir is None:
        message = "no PostgreSQL server binaries (initdb, pg_ctl) for a throw-away server"
        if services.IN_CI:
            pytest.fail(f"{message}; CI requires them", pytrace=False)
        pytest.skip(message)
    root = Path(tempfile.mkdtemp(prefix="relay-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, user=OS_USER, group=OS_USER)
    server = PgServer(bindir, root, free_port())
    try:
        server.init()
        server.start()
        yield server
    finally:
        try:
            if server.running():
                # Immediate: nothing on a throw-away server is worth a checkpoint.
                server.stop("immediate")
        finally:
            shutil.rmtree(root, ignore_errors=True)


def accepts_connections(engine: sa.Engine) -> bool:
    """Whether ``engine``'s server answers a query now."""
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError:
        return False
    return True
