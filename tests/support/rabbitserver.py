"""A throw-away RabbitMQ node for the tests that kill, alarm or reconfigure a broker.

The shared node on 5672 serves everyone on the machine; a test that needs ``max_message_size``,
a memory alarm or a dead node gets its own instead: Debian's ``rabbitmq-server`` started under
its own node name, AMQP port, distribution port, ``HOME`` (Erlang cookie), data and log
directories in a temporary directory, with no plugins. It shares the machine's ``epmd``, which
only maps names to ports. Killed (the whole process group) and deleted on exit. Skipped when
RabbitMQ is not installed, failed under ``CI``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

import pytest

from tests.support import services
from tools.pgserver import free_port

#: Where Debian installs the server's own scripts (``/usr/sbin``'s wrappers switch user).
DEBIAN_SBIN = "/usr/lib/rabbitmq/lib"
#: How long a node may take to boot on a loaded machine.
START_TIMEOUT = 120.0


def find_sbin() -> Path | None:
    """The directory holding ``rabbitmq-server`` and ``rabbitmqctl``, newest first."""
    root = Path(DEBIAN_SBIN)
    if root.is_dir():
        found = sorted(root.glob("rabbitmq_server-*/sbin/rabbitmq-server"))
        if found:
            return found[-1].parent
    server = shutil.which("rabbitmq-server")
    return Path(server).parent if server else None


class RabbitNode:
    """One RabbitMQ node in ``root``, its AMQP listener on 127.0.0.1:``port`` only."""

    def __init__(
        self, sbin: Path, root: Path, config: Mapping[str, str], cookie: str | None = None
    ) -> None:
        self.sbin = sbin
        #: The Erlang cookie: nodes of one cluster (and their rabbitmqctl) share it.
        self.cookie = cookie
        self.root = root
        self.port = free_port()
        self.dist_port = free_port()
        self.name = f"relaytest-{uuid.uuid4().hex[:8]}@localhost"
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}//"
        self.config = {
            "listeners.tcp.default": f"127.0.0.1:{self.port}",
            "loopback_users": "none",
            **config,
        }
        self.process: subprocess.Popen[bytes] | None = None

    def _env(self) -> dict[str, str]:
        home = self.root / "home"
        return {
            **os.environ,
            "HOME": str(home),  # the Erlang cookie of this node and of its rabbitmqctl
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.root / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.root / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.root / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.root / "enabled_plugins"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.root / "advanced.config"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Boot the node and wait until its AMQP port accepts a connection."""
        for name in ("home", "mnesia", "log"):
            (self.root / name).mkdir(parents=True, exist_ok=True)
        if self.cookie is not None:
            cookie = self.root / "home" / ".erlang.cookie"
            if not cookie.exists():
                cookie.write_text(self.cookie)
                cookie.chmod(0o400)
        (self.root / "enabled_plugins").write_text("[].\n")
        (self.root / "advanced.config").write_text("[].\n")
        lines = [f"{key} = {value}" for key, value in self.config.items()]
        (self.root / "rabbitmq.conf").write_text("\n".join(lines) + "\n")
        out = open(self.root / "server.out", "ab")  # noqa: SIM115 (closed with the process)
        self.process = subprocess.Popen(
            [str(self.sbin / "rabbitmq-server")],
            env=self._env(),
            cwd=self.root,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # one process group: beam and its helpers die together
        )
        out.close()
        deadline = time.monotonic() + timeout
        while not self.accepts_connections():
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = (self.root / "server.out").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"rabbitmq-server did not start:\n{tail}")
            time.sleep(0.2)

    def accepts_connections(self) -> bool:
        """Whether the node completes an AMQP handshake now (a bound port is not enough)."""
        import kombu

        try:
            with kombu.Connection(self.url, connect_timeout=2) as conn:
                conn.ensure_connection(max_retries=1, timeout=2)
        except Exception:
            return False
        return True

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        """``rabbitmqctl -n NODE ARGS`` against this node only; its output."""
        done = subprocess.run(
            [str(self.sbin / "rabbitmqctl"), "-n", self.name, *args],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def join(self, other: RabbitNode) -> None:
        """Join ``other``'s cluster (this node must be fresh; both share a cookie)."""
        self.ctl("stop_app")
        self.ctl("join_cluster", other.name, timeout=120)
        self.ctl("start_app", timeout=120)

    def memory_alarm(self, on: bool) -> None:
        """Raise (or clear) a memory alarm: the node blocks every publishing connection."""
        self.ctl("set_vm_memory_high_watermark", "0.0000001" if on else "0.4")

    def kill(self) -> None:
        """SIGKILL the node's whole process group: a broker host that vanishes."""
        process = self.process
        if process is not None and process.poll() is None:
            with suppress(ProcessLookupError):  # it died on its own meanwhile
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


class NoRabbitBinaries(RuntimeError):
    """No rabbitmq-server/erl binaries for a throw-away RabbitMQ node (Debian: ``apt-get
    install rabbitmq-server``)."""


def installed_sbin() -> Path | None:
    """:func:`find_sbin`, when Erlang's ``erl`` is there to run it."""
    sbin = find_sbin()
    return sbin if sbin is not None and shutil.which("erl") is not None else None


@contextmanager
def started_node(
    config: Mapping[str, str] | None = None, cookie: str | None = None
) -> Iterator[RabbitNode]:
    """A started :class:`RabbitNode` with ``config`` (``rabbitmq.conf`` keys), killed and
    deleted on exit whatever happened; raises :class:`NoRabbitBinaries` when RabbitMQ is not
    installed (outside pytest: the chaos soak's)."""
    sbin = installed_sbin()
    if sbin is None:
        raise NoRabbitBinaries(NoRabbitBinaries.__doc__)
    root = Path(tempfile.mkdtemp(prefix="relay-rabbit-"))
    rabbit = RabbitNode(sbin, root, config or {}, cookie)
    try:
        rabbit.start()
        yield rabbit
    finally:
        try:
            rabbit.kill()
        finally:
            shutil.rmtree(root, ignore_errors=True)


@contextmanager
def throwaway_node(
    config: Mapping[str, str] | None = None, cookie: str | None = None
) -> Iterator[RabbitNode]:
    """:func:`started_node` for a test: skipped when RabbitMQ is not installed (failed under
    ``CI``)."""
    if installed_sbin() is None:
        message = "no rabbitmq-server/erl binaries for a throw-away RabbitMQ node"
        if services.IN_CI:
            pytest.fail(f"{message}; CI requires them", pytrace=False)
        pytest.skip(message)
    with started_node(config, cookie) as started:
        yield started


@contextmanager
def throwaway_cluster(size: int) -> Iterator[list[RabbitNode]]:
    """``size`` throw-away nodes clustered together (the others joined the first), killed and
    deleted on exit."""
    cookie = uuid.uuid4().hex.upper()
    with ExitStack() as stack:
        nodes = [stack.enter_context(throwaway_node(cookie=cookie)) for _ in range(size)]
        for node in nodes[1:]:
            node.join(nodes[0])
        yield nodes
