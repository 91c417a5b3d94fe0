"""Deadlines and liveness of the AMQP publisher's connection: every broker call has a bound.

- :func:`connection_options`: connect, read and write timeouts and the AMQP heartbeat, derived
  from the confirm timeout (itself derived from the lease), so that no socket call waits for
  ever: a frozen broker, or one that stopped reading, is a connection fault within seconds.
- :class:`BlockedState`: RabbitMQ's ``connection.blocked``/``unblocked`` (a memory or disk
  alarm): logged once per episode with the broker's reason, reported to a gauge; while blocked
  the publisher writes nothing (publishing is paused, never stuck in a socket write).
- :class:`HeartbeatPump`: py-amqp sends heartbeats only when asked; while the publisher is idle
  this thread reads what the broker sent (heartbeats, ``unblocked``) and answers, so an idle
  relay keeps its connection and a dead one is noticed before the next batch needs it.
- :class:`WatchedPublisher`: the three together, under the AMQP publisher.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import kombu

from relay.config import timing
from relay.exceptions import BrokerBlocked, BrokerUnavailable
from relay.publishers.kombu_connection import KombuPublisher
from relay.threads import Background

log = logging.getLogger(__name__)

#: Told ``reason`` when the broker blocks publishing, None when it unblocks (a gauge).
OnBlocked = Callable[[str | None], None]


def connection_options(confirm_timeout: float) -> dict[str, Any]:
    """``kombu.Connection`` keywords bounding every call on an AMQP connection.

    The heartbeat is the confirm timeout (whole seconds, as AMQP negotiates it): a connection
    silent for two of them is dead. A read (a declare, the handshake) waits at most a confirm
    timeout; a write that makes no progress for :data:`~relay.config.timing.
    BROKER_WRITE_STALL_MAX_SECONDS` (or the confirm timeout, if shorter) is abandoned, so a
    relay told to stop is never held by a broker that stopped reading."""
    return {
        "connect_timeout": confirm_timeout,
        "heartbeat": max(1, math.ceil(confirm_timeout)),
        "transport_options": {
            "read_timeout": confirm_timeout,
            "write_timeout": min(confirm_timeout, timing.BROKER_WRITE_STALL_MAX_SECONDS),
        },
    }


class BlockedState:
    """Whether the broker has blocked publishing, across reconnects: an episode begins with
    the first ``connection.blocked`` and ends with ``unblocked`` or a confirmed publish. Each
    episode is logged once, with the broker's reason, however often it is seen again."""

    def __init__(self, on_blocked: OnBlocked | None = None) -> None:
        self.reason: str | None = None
        self._since = 0.0
        self._report = on_blocked

    def blocked(self, reason: str) -> None:
        if self.reason is None:
            self._since = time.monotonic()
            log.warning(
                "broker blocked publishing (%s): publishing is paused until it unblocks; "
                "nothing is lost and no attempt is spent",
                reason,
            )
            if self._report is not None:
                self._report(reason)
        self.reason = reason

    def unblocked(self) -> None:
        if self.reason is None:
            return
        self.reason = None
        log.warning("broker unblocked publishing after %.1fs", time.monotonic() - self._since)
        if self._report is not None:
            self._report(None)


def listen_for_blocks(
    amqp_conn: Any, on_blocked: Callable[[str], None], on_unblocked: Callable[[], None]
) -> None:
    """Route ``amqp_conn``'s ``connection.blocked`` (with the broker's reason, e.g. "low on
    memory", which py-amqp drops: its method has no arguments) and ``unblocked`` here."""
    from amqp import spec

    blocked = spec.Connection.Blocked
    amqp_conn._METHODS = {**amqp_conn._METHODS, blocked: spec.method(blocked, "s")}
    amqp_conn._callbacks[blocked] = lambda reason="": on_blocked(
        reason or "connection blocked, see broker logs"
    )
    amqp_conn.on_unblocked = on_unblocked


class HeartbeatPump(Background):
    """Calls ``tick`` every ``interval`` seconds while ``lock`` is free (the publisher is not
    publishing: a publish reads and writes the connection itself), until stopped."""

    def __init__(self, tick: Callable[[], None], lock: threading.RLock, interval: float) -> None:
        super().__init__("relay-amqp-heartbeat", self._run)
        self._tick = tick
        self._lock = lock
        self._interval = interval

    def stop(self, timeout: float | None = 0.0) -> None:
        """Ask the thread to end; it does within one interval (not waited for: it may be
        waiting for the lock that the caller holds)."""
        super().stop(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            if not self._lock.acquire(blocking=False):
                continue  # publishing: the publish itself keeps the connection alive
            try:
                if not self._stop.is_set():
                    self._tick()
            except Exception as exc:  # never let the pump die silently; the next publish sees it
                log.warning("broker heartbeat failed: %s", exc)
            finally:
                self._lock.release()


class WatchedPublisher(KombuPublisher):
    """A Kombu publisher on AMQP whose connection is watched: every call bounded
    (:func:`connection_options`), heartbeats kept up while idle (:class:`HeartbeatPump`), and
    the broker's blocks obeyed (:class:`BlockedState`): while blocked nothing is written and a
    batch is given back as :class:`~relay.exceptions.BrokerBlocked` within
    ``BROKER_BLOCKED_WAIT_SECONDS``. Subclasses call :meth:`_await_unblock` before writing."""

    def __init__(
        self,
        url: str,
        exchange: str,
        *,
        confirm_timeout: float = 10.0,
        on_blocked: OnBlocked | None = None,
    ) -> None:
        super().__init__(url, exchange, confirm_timeout=confirm_timeout)
        #: Why the broker blocked this connection; None while it takes publishes.
        self._paused: str | None = None
        self._blocked = BlockedState(on_blocked)
        self._pump: HeartbeatPump | None = None

    def _connection_options(self) -> dict[str, Any]:
        return connection_options(self.confirm_timeout)

    def _setup(self, conn: kombu.Connection, channel: Any) -> None:
        self._paused = None  # a new connection is blocked only once the broker says so
        amqp_conn: Any = conn.connection
        listen_for_blocks(amqp_conn, self._on_blocked, self._on_unblocked)
        if self._pump is not None:
            self._pump.stop()
        interval = max(1, amqp_conn.heartbeat or 0) / timing.HEARTBEATS_PER_INTERVAL
        self._pump = HeartbeatPump(self._idle, self._lock, interval).start()

    def _on_blocked(self, reason: str) -> None:
        self._paused = reason
        self._blocked.blocked(reason)

    def _on_unblocked(self) -> None:
        self._paused = None
        self._blocked.unblocked()

    def _idle(self) -> None:
        """Between publishes (the heartbeat pump): read what the broker sent (heartbeats,
        ``unblocked``, late confirms of a batch given up) and send a heartbeat when due; a
        connection found dead is closed, and the next publish reconnects."""
        conn = self._conn
        if conn is None:
            return
        try:
            with self._translated():
                self._read_pending(0.0)
                conn.heartbeat_check(rate=timing.HEARTBEATS_PER_INTERVAL)
        except BrokerUnavailable as exc:
            log.warning("%s (idle connection); reconnecting at the next publish", exc)
            self.close()

    def _read_frame(self, timeout: float) -> None:
        """Read and handle one frame from the broker, waiting at most ``timeout`` seconds
        (TimeoutError when none came). Not ``drain_events``: py-amqp's loops until a method
        arrives, each read with the whole timeout again, so heartbeats arriving within it
        (while the broker blocks us, nothing else comes) kept it waiting for ever."""
        assert self._conn is not None
        amqp_conn: Any = self._conn.connection
        amqp_conn.blocking_read(max(0.01, timeout))

    def _read_pending(self, seconds: float) -> None:
        """Handle what the broker sent, for up to ``seconds`` (0: only what has arrived)."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                self._read_frame(deadline - time.monotonic())
            except TimeoutError:
                if time.monotonic() >= deadline:
                    return

    def _await_unblock(self) -> None:
        """While the broker blocks this connection, write nothing: wait a moment for
        ``unblocked``, else give the batch back (no attempt spent, no breaker)."""
        self._read_pending(0.0)
        deadline = time.monotonic() + timing.BROKER_BLOCKED_WAIT_SECONDS
        while self._paused is not None and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):  # the loop's own deadline ends it
                self._read_frame(deadline - time.monotonic())
        if self._paused is not None:
            raise BrokerBlocked(f"broker blocked publishing: {self._paused}")

    def _release(self, conn: kombu.Connection) -> None:
        if self._pump is not None:
            self._pump.stop()
            self._pump = None
        if self._paused is not None or self._blocked.reason is not None:
            # A blocked broker reads nothing, so it would never answer connection.close, and
            # its heartbeats keep py-amqp's wait for close-ok from ever timing out: drop the
            # socket instead (also for a connection not yet told, during a block episode).
            conn.collect()
            return
        super()._release(conn)
