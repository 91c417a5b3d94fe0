"""A throw-away PostgreSQL server: ``initdb`` into a temporary directory, ``pg_ctl start`` on a
free loopback port with its socket in that directory, removed (stopped, then deleted) at the
end. The tests that stop or restart a server use one (tests/support/pgserver.py), and so does a
benchmark that needs PostgreSQL's own defaults where the shared server departs from them
(``bench.retention``: autovacuum). Nothing here imports pytest.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

#: A server whose data is thrown away: durability buys nothing and costs the shared disk.
FAST: Mapping[str, str] = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}

#: A primary with a synchronous streaming standby (:func:`replicated_pair`): a commit is
#: acknowledged once the standby has it, so a failover loses no acknowledged commit.
REPLICATED: Mapping[str, str] = {
    **FAST,
    "synchronous_commit": "on",
    "wal_level": "replica",
    "max_wal_senders": "8",
    "hot_standby": "on",
}

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

    def start(self, settings: Mapping[str, str] = FAST) -> None:
        """Start with ``settings`` (server parameters) and wait until it accepts connections."""
        options = (
            f"-c port={self.port} -c listen_addresses=127.0.0.1"
            f" -c unix_socket_directories={self.root}"
        ) + "".join(f" -c {name}={value}" for name, value in settings.items())
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop; ``fast`` cuts the sessions, as an operator's restart does."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def base_backup(self, primary: PgServer) -> None:
        """Make this (not yet initialised) server a streaming standby of ``primary``:
        ``pg_basebackup -R`` writes its ``primary_conninfo`` and ``standby.signal``."""
        self._run(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
            "-D", str(self.data), "-R", "-X", "stream", "-c", "fast", "--no-sync",
        )  # fmt: skip

    def follow(self, primary: PgServer) -> None:
        """Make this stopped server a standby of ``primary`` at its next start (an old primary
        coming back after a failover): read-only, in recovery, whether or not it can follow
        the new timeline."""
        conninfo = f"host=127.0.0.1 port={primary.port} user=postgres"
        auto = self.data / "postgresql.auto.conf"
        with auto.open("a") as conf:
            conf.write(f"primary_conninfo = '{conninfo}'\n")
        (self.data / "standby.signal").touch()
        if os.geteuid() == 0:
            for path in (auto, self.data / "standby.signal"):
                shutil.chown(path, user=OS_USER, group=OS_USER)

    def promote(self) -> None:
        """Promote this standby to a primary, and wait until it takes writes."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "promote")

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


def _new_server(bindir: Path) -> PgServer:
    root = Path(tempfile.mkdtemp(prefix="relay-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, user=OS_USER, group=OS_USER)
    return PgServer(bindir, root, free_port())


def _remove(pg: PgServer) -> None:
    try:
        if pg.running():
            # Immediate: nothing on a throw-away server is worth a checkpoint.
            pg.stop("immediate")
    finally:
        shutil.rmtree(pg.root, ignore_errors=True)


class NoServerBinaries(RuntimeError):
    """No ``initdb``/``pg_ctl`` on this machine (Debian: ``apt-get install postgresql``)."""


@contextmanager
def server(settings: Mapping[str, str] = FAST) -> Iterator[PgServer]:
    """A started :class:`PgServer` with ``settings``, stopped and deleted on exit whatever
    happened; raises :class:`NoServerBinaries` when PostgreSQL is not installed."""
    bindir = find_bindir()
    if bindir is None:
        raise NoServerBinaries(NoServerBinaries.__doc__)
    pg = _new_server(bindir)
    try:
        pg.init()
        pg.start(settings)
        yield pg
    finally:
        _remove(pg)


@contextmanager
def replicated_pair() -> Iterator[tuple[PgServer, PgServer]]:
    """A started primary and its synchronous streaming standby (:data:`REPLICATED`), each on
    its own port and directory, both stopped and deleted on exit whatever happened; raises
    :class:`NoServerBinaries` when PostgreSQL is not installed. Start either again (after a
    :meth:`PgServer.promote` or :meth:`PgServer.follow`) with :data:`REPLICATED`."""
    bindir = find_bindir()
    if bindir is None:
        raise NoServerBinaries(NoServerBinaries.__doc__)
    primary, standby = _new_server(bindir), _new_server(bindir)
    try:
        primary.init()
        # remote_apply: an acknowledged commit is already visible on the standby.
        primary.start(
            {**REPLICATED, "synchronous_standby_names": "'*'", "synchronous_commit": "remote_apply"}
        )
        standby.base_backup(primary)
        standby.start(REPLICATED)
        yield primary, standby
    finally:
        try:
            _remove(standby)
        finally:
            _remove(primary)
