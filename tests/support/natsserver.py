"""A throw-away ``nats-server -js`` for the tests that need TLS or credentials on the server.

The shared server on 127.0.0.1:4222 serves everyone on the machine and is never reconfigured; a
test that needs a TLS listener, an ``authorization`` block, NKEY users or operator-mode (JWT)
accounts starts its own: ``nats-server -js -a 127.0.0.1 -p PORT -sd DIR -c CONFIG`` in a
temporary directory, the process group killed and the directory deleted on exit, whatever
happened. Skipped when ``nats-server`` is not installed, failed under ``CI``.

Keys and JWTs are made here with ``nkeys`` (nats-py's ``[nkeys]`` extra): an NKEY user is a
seed file and its public key in the server's config; a credentials file is a user JWT signed by
an account whose JWT an operator signed, the operator's and account's JWTs preloaded into the
server (``resolver: MEMORY``), the format ``nsc`` writes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import services
from tools.pgserver import free_port

#: Debian's package installs it here; elsewhere it is looked up on the PATH.
BINARY = "/usr/sbin/nats-server"
START_TIMEOUT = 30.0


def binary() -> str | None:
    """The ``nats-server`` binary, or None when it is not installed."""
    return BINARY if os.access(BINARY, os.X_OK) else shutil.which("nats-server")


class NatsServer:
    """One ``nats-server -js`` on 127.0.0.1:``port`` with ``config`` (nats-server's syntax)."""

    def __init__(self, executable: str, root: Path, config: str) -> None:
        self.executable, self.root, self.config = executable, root, config
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> str:
        return (self.root / "server.out").read_text(errors="replace")

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the server and wait until it sends its INFO line on the port."""
        (self.root / "server.conf").write_text(self.config)
        out = open(self.root / "server.out", "ab")  # noqa: SIM115 (closed with the process)
        self.process = subprocess.Popen(
            [
                self.executable,
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-sd",
                str(self.root / "store"),
                "-c",
                str(self.root / "server.conf"),
            ],
            cwd=self.root,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nats-server did not start:\n{self.log[-3000:]}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                return sock.recv(5) == b"INFO "
        except OSError:
            return False

    def kill(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


@contextmanager
def throwaway_server(config: str = "") -> Iterator[NatsServer]:
    """A started :class:`NatsServer` with ``config`` (``{root}`` in it: the server's temporary
    directory, for the files a test writes there first); skipped without ``nats-server``,
    failed under ``CI``. Killed and deleted on exit."""
    executable = binary()
    if executable is None:
        message = "no nats-server binary for a throw-away NATS server"
        if services.IN_CI:
            pytest.fail(f"{message}; CI requires it", pytrace=False)
        pytest.skip(message)
    root = Path(tempfile.mkdtemp(prefix="relay-nats-"))
    server = NatsServer(executable, root, config.replace("{root}", str(root)))
    try:
        server.start()
        yield server
    finally:
        try:
            server.kill()
        finally:
            shutil.rmtree(root, ignore_errors=True)


# -- keys and JWTs ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Key:
    """An NKEY: its seed (secret) and public key, both as text."""

    seed: str
    public: str

    def sign(self, data: bytes) -> bytes:
        import nkeys

        return bytes(nkeys.from_seed(bytearray(self.seed.encode())).sign(data))


def new_key(role: str) -> Key:
    """A fresh NKEY of ``role``: "user", "account" or "operator"."""
    import nkeys

    prefix = {
        "user": nkeys.PREFIX_BYTE_USER,
        "account": nkeys.PREFIX_BYTE_ACCOUNT,
        "operator": nkeys.PREFIX_BYTE_OPERATOR,
    }[role]
    seed = nkeys.encode_seed(os.urandom(32), prefix)
    public = nkeys.from_seed(bytearray(seed)).public_key
    return Key(seed.decode(), public.decode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(issuer: Key, subject: str, name: str, nats: dict[str, Any]) -> str:
    """A NATS JWT (v2, ``ed25519-nkey``) of ``subject`` signed by ``issuer``."""
    claims: dict[str, Any] = {
        "iat": int(time.time()),
        "iss": issuer.public,
        "name": name,
        "sub": subject,
        "nats": {**nats, "version": 2},
    }
    body = json.dumps(claims, separators=(",", ":")).encode()
    claims["jti"] = base64.b32encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
    signed = f"{header}.{payload}".encode()
    return f"{header}.{payload}.{_b64(issuer.sign(signed))}"


@dataclass(frozen=True)
class Operator:
    """An operator, one account with JetStream, and one user of it: the server's config block
    and the user's credentials file (``nsc generate creds``'s format)."""

    config: str
    creds: str
    user: Key


def operator_setup() -> Operator:
    """The JWTs of an operator-mode server whose one account may use JetStream."""
    operator, account, user = new_key("operator"), new_key("account"), new_key("user")
    # JetStream in operator mode needs a system account (the server's own subscriptions).
    system = new_key("account")
    unlimited = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1}
    account_jwt = jwt(
        operator,
        account.public,
        "RELAY",
        {
            "type": "account",
            "limits": {
                **unlimited,
                "wildcards": True,
                "conn": -1,
                "leaf": -1,
                "mem_storage": -1,
                "disk_storage": -1,
                "streams": -1,
                "consumer": -1,
            },
        },
    )
    user_jwt = jwt(
        account,
        user.public,
        "relay",
        {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1},
    )
    system_jwt = jwt(operator, system.public, "SYS", {"type": "account", "limits": unlimited})
    operator_jwt = jwt(
        operator, operator.public, "TEST", {"type": "operator", "system_account": system.public}
    )
    config = (
        f"operator: {operator_jwt}\n"
        "resolver: MEMORY\n"
        f"system_account: {system.public}\n"
        f"resolver_preload: {{\n  {account.public}: {account_jwt}\n"
        f"  {system.public}: {system_jwt}\n}}\n"
    )
    creds = (
        f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{user.seed}\n------END USER NKEY SEED------\n"
    )
    return Operator(config, creds, user)
