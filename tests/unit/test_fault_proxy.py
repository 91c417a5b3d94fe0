"""The tests' fault proxy (tests/support/proxy.py) against trivial echo servers on loopback:
switching targets, freezing, thawing and added latency do what the fault tests rely on."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.proxy import TcpProxy

#: How long "no answer" is waited for: a silent connection stays silent far longer.
SILENCE = 0.5


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        name: bytes = self.server.name  # type: ignore[attr-defined]
        with contextlib.suppress(OSError):  # the proxy resets connections as it closes
            while data := self.request.recv(1024):
                self.request.sendall(name + data)


@contextlib.contextmanager
def echo_server(name: str) -> Iterator[socketserver.ThreadingTCPServer]:
    """Answers each chunk with ``name`` + the chunk, until closed."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    server.name = name.encode()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def proxy_to(server: socketserver.ThreadingTCPServer) -> Iterator[TcpProxy]:
    proxy = TcpProxy(server.server_address[:2])
    try:
        yield proxy
    finally:
        proxy.close()


def client(proxy: TcpProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=10)


def ask(sock: socket.socket, text: bytes = b"ping", timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    sock.sendall(text)
    return sock.recv(1024)


def silent(sock: socket.socket) -> bool:
    """Nothing comes back (no answer, no close) within :data:`SILENCE`."""
    sock.settimeout(SILENCE)
    try:
        sock.sendall(b"ping")
        return sock.recv(1024) is None  # b"" (a close) or data: not silent
    except TimeoutError:
        return True


@pytest.mark.timeout(30)
def test_switch_sends_new_connections_to_the_new_target_and_keeps_old_ones() -> None:
    """A moved DNS name / virtual IP: new connections reach B, the one made before keeps A."""
    with echo_server("A") as a, echo_server("B") as b, proxy_to(a) as proxy:
        old = client(proxy)
        assert ask(old) == b"Aping"
        proxy.switch(b.server_address[:2])
        new = client(proxy)
        assert ask(new) == b"Bping"
        assert ask(old) == b"Aping"
        old.close()
        new.close()


@pytest.mark.timeout(30)
def test_freeze_silences_connections_for_good_and_holds_new_ones_until_thaw() -> None:
    """A vanished host: made connections hear nothing, not even their server going away; new
    ones are accepted but unanswered, and after thaw reach the target of that moment."""
    with echo_server("A") as a, echo_server("B") as b, proxy_to(a) as proxy:
        old = client(proxy)
        assert ask(old) == b"Aping"
        assert proxy.freeze() == 1
        assert silent(old)
        held = client(proxy)  # the TCP handshake completes: the proxy accepts
        assert silent(held)
        a.shutdown()
        a.server_close()
        assert silent(old), "a frozen connection heard its server go away"
        proxy.switch(b.server_address[:2])
        assert proxy.thaw() == 1
        held.settimeout(10)
        # What was sent while held is answered now, by B.
        assert held.recv(1024).startswith(b"Bping")
        with client(proxy) as fresh:
            assert ask(fresh) == b"Bping"
        assert silent(old), "thaw revived a connection frozen for good"
        old.close()
        held.close()


@pytest.mark.timeout(30)
def test_latency_delays_every_chunk() -> None:
    """With latency set, a round trip takes at least twice it (one chunk each way)."""
    with echo_server("A") as a, proxy_to(a) as proxy:
        sock = client(proxy)
        assert ask(sock) == b"Aping"
        proxy.latency(0.2)
        started = time.monotonic()
        assert ask(sock) == b"Aping"
        assert time.monotonic() - started >= 0.4
        proxy.latency(0)
        sock.close()
