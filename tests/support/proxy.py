"""A loopback TCP proxy the tests control: forwards to a real server, can cut it off and restore it.

``cut()`` resets every open connection and, until ``restore()``, resets each new one as soon as
it is accepted (the client sees a refused or reset connection, as when a broker goes away).
``stall()`` keeps every connection open but forwards nothing until ``restore()`` (a black hole:
a partition, or a broker that blocks publishers under a resource alarm).
``switch(target)`` sends new connections to another server while those made keep theirs (a DNS
name or virtual IP moved after a failover). ``freeze()`` is a host that vanished without a word:
the connections made are silent for good (whatever their server does, the client hears nothing,
not even a close), and new ones are accepted but never answered until ``thaw()``, which forwards
them to the target of that moment. ``latency(seconds)`` delays every chunk forwarded.
Threads, bounded: at most ``max_connections`` live connections, two pump threads each.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator

_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST, not FIN


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        # Wakes a pump blocked in recv on it (close alone does not) and sends nothing.
        sock.shutdown(socket.SHUT_RD)
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
        #: Connections frozen for good (their host vanished), and new ones held unanswered.
        self._frozen: list[tuple[socket.socket, socket.socket]] = []
        self._held: list[socket.socket] = []
        self._freezing = False
        self._latency = 0.0
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
        """Accept and forward connections again (those frozen for good stay silent)."""
        self._open.set()
        self._flowing.set()
        self.thaw()

    def switch(self, target: tuple[str, int]) -> None:
        """New connections go to ``target``; connections made keep their server."""
        with self._lock:
            self.target = target

    def freeze(self) -> int:
        """Silence every open connection for good and hold new ones unanswered until
        :meth:`thaw`; returns how many connections were frozen."""
        with self._lock:
            self._freezing = True
            pairs, self._pairs = self._pairs, []
            self._frozen.extend(pairs)
        return len(pairs)

    def thaw(self) -> int:
        """Answer new connections again: those held so far are forwarded to the current target
        (the frozen ones stay silent); returns how many were held."""
        with self._lock:
            self._freezing = False
            held, self._held = self._held, []
        for client in held:
            self._forward(client)
        return len(held)

    def latency(self, seconds: float) -> None:
        """Delay every chunk forwarded, both ways, by ``seconds`` (0: none)."""
        self._latency = seconds

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def close(self) -> None:
        """Stop accepting, reset everything, join the threads."""
        self._closed.set()
        self._flowing.set()
        self.cut()
        with self._lock:
            frozen, self._frozen = self._frozen, []
            held, self._held = self._held, []
        for sock in [s for pair in frozen for s in pair] + held:
            _reset(sock)
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
            with self._lock:
                if self._freezing:
                    self._held.append(client)
                    continue
            self._forward(client)

    def _forward(self, client: socket.socket) -> None:
        """Connect ``client`` to the current target and pump both ways."""
        with self._lock:
            target = self.target
        try:
            upstream = socket.create_connection(target, timeout=5)
        except OSError:
            self.refused += 1
            _reset(client)
            return
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

    def _is_frozen(self, pair: tuple[socket.socket, socket.socket]) -> bool:
        with self._lock:
            return pair in self._frozen

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
                if self._is_frozen(pair):
                    return  # silent for good: nothing forwarded, nothing closed
                if self._latency:
                    time.sleep(self._latency)
                dst.sendall(data)
        except OSError:
            pass
        with self._lock:
            if pair in self._frozen:
                return  # its server went away: the client must not hear of it
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
