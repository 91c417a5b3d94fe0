"""A throw-away MariaDB server: ``mariadb-install-db`` into a temporary directory, ``mariadbd``
on a free loopback port with its socket in that directory, killed and deleted at the end. The
retention benchmark runs MariaDB on one (``bench.retention --mariadb defaults``) so that its
figures come with the server's settings written down beside them, and so that a 5 GB table, or
any setting a run needs, never touches the machine's shared server. Nothing here imports
pytest.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

from tools.pgserver import free_port

#: What Debian's packaged server sets in its own configuration (``--no-defaults`` reads none),
#: so tables are created as on the shared server; everything else is MariaDB's default
#: (a 128 MiB buffer pool, a 96 MiB redo log, ``innodb_io_capacity`` 200, durable commits).
DEFAULTS: Mapping[str, str] = {
    "character-set-server": "utf8mb4",
    "collation-server": "utf8mb4_general_ci",
}

#: The settings the benchmark can name (``--mariadb``): the shared server's, without its
#: ``skip_name_resolve`` (compared variable by variable, the only other difference).
PRESETS: Mapping[str, Mapping[str, str]] = {"defaults": DEFAULTS}

#: The OS user that runs the server when run as root (mariadbd refuses root without --user).
OS_USER = "mysql"
MARIADBD = "/usr/sbin/mariadbd"


def find_binaries() -> tuple[str, str] | None:
    """``(mariadb-install-db, mariadbd)``, or None when MariaDB's server is not installed."""
    install = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
    server = MARIADBD if Path(MARIADBD).is_file() else shutil.which("mariadbd")
    return (install, server) if install and server else None


class NoServerBinaries(RuntimeError):
    """No ``mariadb-install-db``/``mariadbd`` here (Debian: ``apt-get install mariadb-server``)."""


class MariaServer:
    """One MariaDB server in ``root``, listening on 127.0.0.1:``port`` only; user ``root``,
    no password."""

    def __init__(self, binaries: tuple[str, str], root: Path, port: int) -> None:
        self.install, self.server = binaries
        self.root, self.port = root, port
        self.data = root / "data"
        self.log = root / "server.log"
        self.admin_url = f"mysql+pymysql://root@127.0.0.1:{port}/mysql"
        self.process: subprocess.Popen[bytes] | None = None

    def _user(self) -> list[str]:
        return [f"--user={OS_USER}"] if os.geteuid() == 0 else []

    def init(self) -> None:
        done = subprocess.run(
            [
                self.install, "--no-defaults", f"--datadir={self.data}", *self._user(),
                "--auth-root-authentication-method=normal", "--skip-test-db",
            ],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed ({done.returncode}): {done.stderr}")

    def start(self, settings: Mapping[str, str], timeout: float = 60.0) -> None:
        """Start with ``settings`` (server options without their ``--``) and wait until it
        accepts connections."""
        command = [
            self.server, "--no-defaults", f"--datadir={self.data}", *self._user(),
            f"--socket={self.root / 'mysqld.sock'}", f"--port={self.port}",
            "--bind-address=127.0.0.1", f"--pid-file={self.root / 'mysqld.pid'}",
            f"--log-error={self.log}",
            *(f"--{name}={value}" for name, value in settings.items()),
        ]  # fmt: skip
        quiet = subprocess.DEVNULL
        self.process = subprocess.Popen(command, stdout=quiet, stderr=quiet)
        engine = sa.create_engine(self.admin_url)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    with engine.connect():
                        return
                except sa.exc.OperationalError:
                    if self.process.poll() is not None or time.monotonic() > deadline:
                        log = self.log.read_text(errors="replace") if self.log.exists() else ""
                        tail = log[-2000:]
                        raise RuntimeError(f"mariadbd did not start:\n{tail}") from None
                    time.sleep(0.2)
        finally:
            engine.dispose()

    def settings(self, *names: str) -> dict[str, str]:
        """The running server's values of ``names`` (variables, with underscores)."""
        engine = sa.create_engine(self.admin_url)
        try:
            with engine.connect() as conn:
                row = conn.execute(sa.text("SELECT " + ", ".join(f"@@{n}" for n in names))).one()
        finally:
            engine.dispose()
        return {name: str(value) for name, value in zip(names, row, strict=True)}

    def kill(self) -> None:
        """SIGKILL: nothing on a throw-away server is worth a clean shutdown."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)


@contextmanager
def server(settings: Mapping[str, str] = DEFAULTS) -> Iterator[MariaServer]:
    """A started :class:`MariaServer` with ``settings``, killed and deleted on exit whatever
    happened; raises :class:`NoServerBinaries` when MariaDB's server is not installed."""
    binaries = find_binaries()
    if binaries is None:
        raise NoServerBinaries(NoServerBinaries.__doc__)
    root = Path(tempfile.mkdtemp(prefix="relay-mariadb-"))
    if os.geteuid() == 0:
        shutil.chown(root, user=OS_USER, group=OS_USER)
    maria = MariaServer(binaries, root, free_port())
    try:
        maria.init()
        maria.start(settings)
        yield maria
    finally:
        try:
            maria.kill()
        finally:
            shutil.rmtree(root, ignore_errors=True)
