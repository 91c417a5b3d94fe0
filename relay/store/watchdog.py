"""Abandons a database call that runs past its deadline, by shutting its socket from outside.

TCP keepalives and ``tcp_user_timeout`` notice a peer that stops acknowledging; they do not
notice one that acknowledges and never answers: a hung server, a frozen proxy, virtual IP or
storage. psycopg has no timeout for a statement in flight, so such a call would wait for ever,
and the lease would be the first thing to notice (issue 38: two relays hung for minutes). The
watchdog shuts down the call's socket from its own thread: the driver's wait returns at once
with a broken connection, SQLAlchemy invalidates it and the rest of its pool, and the store
raises :class:`relay.exceptions.DatabaseUnavailable`, which the callers retry with backoff.

A guarded call costs 6.6 µs of CPU (a lock, a duplicated descriptor; measured on the 2-core
machine): nothing beside a claim's round trip, 0.03 % of a core for the wake-up's 40 looks a
second. Only the dispatch path uses it (:meth:`relay.store.dispatch_path.store.DispatchStore.
from_settings`, the wake-ups): its calls are short by design, unlike an operator's purge or a
migration.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import Engine

log = logging.getLogger(__name__)

#: The watchdog's thread ends after this many idle looks, and starts again with the next call.
_IDLE_LOOKS = 40


class Guard:
    """One call in flight: its deadline and the sockets it uses (duplicated descriptors, so a
    shutdown can never reach a socket that was closed and its number reused meanwhile)."""

    __slots__ = ("deadline", "fired", "sockets")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired = False
        self.sockets: list[socket.socket] = []

    def fire(self) -> None:
        self.fired = True
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def release(self) -> None:
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()
        self.sockets.clear()


class Watchdog:
    """Abandons any guarded call still running ``seconds`` after it began (one look every
    quarter of ``seconds``, so within 1.25 times it)."""

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        #: Calls abandoned so far.
        self.abandoned = 0
        self._every = max(0.05, seconds / 4)
        self._lock = threading.Lock()
        self._guards: dict[int, Guard] = {}
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def guard(self) -> Iterator[Guard]:
        """Guard the calls this thread makes inside the block (sockets named with
        :meth:`watch`); a guard already open on this thread covers nested blocks."""
        me = threading.get_ident()
        with self._lock:
            outer = self._guards.get(me)
            if outer is None:
                guard = self._guards[me] = Guard(self.clock() + self.seconds)
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="relay-db-watchdog", daemon=True
                    )
                    self._thread.start()
        if outer is not None:
            yield outer
            return
        try:
            yield guard
        finally:
            with self._lock:
                del self._guards[me]
                guard.release()

    def watch(self, dbapi_connection: Any) -> None:
        """Name the connection this thread's guarded call uses (no guard open: nothing)."""
        with self._lock:
            guard = self._guards.get(threading.get_ident())
        if guard is None:
            return
        sock = socket_of(dbapi_connection)
        if sock is None:
            return
        with self._lock:
            guard.sockets.append(sock)
            if guard.fired:  # named after its deadline passed: abandoned at once
                guard.fire()

    def _run(self) -> None:
        idle = 0
        while True:
            time.sleep(self._every)
            now = self.clock()
            with self._lock:
                if not self._guards:
                    idle += 1
                    if idle >= _IDLE_LOOKS:
                        self._thread = None
                        return
                    continue
                idle = 0
                late = [g for g in self._guards.values() if not g.fired and g.deadline <= now]
                for guard in late:
                    guard.fire()
                self.abandoned += len(late)
            for guard in late:
                log.warning(
                    "database call abandoned: no answer after %.1fs (its deadline, derived from "
                    "the lease); its connection is shut and the call fails as a connection fault",
                    now - guard.deadline + self.seconds,
                )


def socket_of(dbapi_connection: Any) -> socket.socket | None:
    """A duplicate of the socket under a DBAPI connection (psycopg, PyMySQL); None for one
    without (SQLite) or already closed."""
    driver = getattr(dbapi_connection, "driver_connection", dbapi_connection)
    try:
        fileno = getattr(driver, "fileno", None)  # psycopg
        if callable(fileno):
            fd = int(fileno())
        else:
            sock = getattr(driver, "_sock", None)  # PyMySQL keeps its socket here
            fd = sock.fileno() if isinstance(sock, socket.socket) else -1
        if fd < 0:
            return None
        return socket.socket(fileno=os.dup(fd))
    except Exception:  # closed, or not a socket: nothing to abandon
        return None


_WATCHDOGS: weakref.WeakKeyDictionary[Engine, Watchdog] = weakref.WeakKeyDictionary()


def install(engine: Engine, seconds: float) -> Watchdog:
    """Give ``engine`` a watchdog of ``seconds`` (:func:`of`); its pre-ping, which runs before a
    store sees the connection, is guarded too."""
    dog = _WATCHDOGS[engine] = Watchdog(seconds)
    ping = engine.dialect.do_ping

    def guarded_ping(dbapi_connection: Any) -> bool:
        dog.watch(dbapi_connection)
        return ping(dbapi_connection)

    # The pre-ping of a pooled connection to a frozen server would hang before any store code
    # runs; the dialect's ping is the one place it passes through.
    setattr(engine.dialect, "do_ping", guarded_ping)  # noqa: B010 (mypy: a method)
    return dog


def of(engine: Engine) -> Watchdog | None:
    """The watchdog of ``engine``, if it has one."""
    return _WATCHDOGS.get(engine)
