"""A loopback TCP proxy the tests control: forwards to a real server, can cut it off and restore it.

``cut()`` resets every open connection and, until ``restore()``, resets each new one as soon as
it is accepted (the client sees a refused or reset connection, as when a broker goes away).
``stall()`` keeps every connection open but forwards nothing until ``restore()`` (a black hole:
a partition, or a broker that blocks publishers under a resource alarm).
Threads, bounded: at most ``max_connections`` live connections, two pump threads each.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator

_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST, not FIN


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    with contextlib.suppress(OSError):
        sock.close()


class TcpProxy:
    """Listens on 127.0.0.1 (a free port) and forwards each connection to ``target``."""

    def __init__(self, target: tuple[str, int], *, max_connections: int = 64) -> None:
        self.target = target
        self.max_connections = max_connections
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._open = threading.Event()
        self._open.set()
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self.accepted = 0
        self.refused = 0
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="proxy-accept", daemon=True
        )
        self._acceptor.start()

    # -- control ---------------------------------------------------------------------------
    def url_for(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's."""
        scheme, _, rest = url.partition("://")
        userinfo, at, hostpart = rest.rpartition("@")
        _, slash, path = hostpart.partition("/")
        return f"{scheme}://{userinfo}{at}127.0.0.1:{self.port}{slash}{path}"

    def cut(self) -> int:
        """Reset every open connection and refuse new ones; returns how many were reset."""
        self._open.clear()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for client, upstream in pairs:
            _reset(client)
            _reset(upstream)
        return len(pairs)

    def stall(self) -> None:
        """Keep connections (and accept new ones) but forward no byte until :meth:`restore`."""
        self._flowing.clear()

    def restore(self) -> None:
        """Accept and forward connections again."""
        self._open.set()
        self._flowing.set()

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def close(self) -> None:
        """Stop accepting, reset everything, join the threads."""
        self._closed.set()
        self._flowing.set()
        self.cut()
        self._acceptor.join(timeout=5)
        with contextlib.suppress(OSError):
            self._listener.close()
        for t in self._threads:
            t.join(timeout=5)

    # -- forwarding ------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._open.is_set() or self.connections >= self.max_connections:
                self.refused += 1
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                self.refused += 1
                _reset(client)
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            pair = (client, upstream)
            with self._lock:
                self._pairs.append(pair)
            self.accepted += 1
            self._threads = [t for t in self._threads if t.is_alive()]
            for src, dst in ((client, upstream), (upstream, client)):
                t = threading.Thread(target=self._pump, args=(src, dst, pair), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(
        self, src: socket.socket, dst: socket.socket, pair: tuple[socket.socket, socket.socket]
    ) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                while not self._flowing.wait(0.2):
                    if self._closed.is_set():
                        return
                dst.sendall(data)
        except OSError:
            pass
        with self._lock:
            if pair in self._pairs:
                self._pairs.remove(pair)
        for sock in pair:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


@contextlib.contextmanager
def running_proxy(host: str, port: int) -> Iterator[TcpProxy]:
    """A proxy to ``host:port``, closed on exit."""
    proxy = TcpProxy((host, port))
    try:
        yield proxy
    finally:
        proxy.close()
