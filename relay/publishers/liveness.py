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
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from relay.config import timing

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


class HeartbeatPump:
    """Calls ``tick`` every ``interval`` seconds while ``lock`` is free (the publisher is not
    publishing: a publish reads and writes the connection itself), until stopped."""

    def __init__(self, tick: Callable[[], None], lock: threading.RLock, interval: float) -> None:
        self._tick = tick
        self._lock = lock
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="relay-amqp-heartbeat", daemon=True)

    def start(self) -> HeartbeatPump:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the thread to end; it does within one interval (not joined: it may be waiting
        for the lock that the caller holds)."""
        self._stop.set()

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
