"""The one lifecycle of the relay's background threads (the lease keeper, the broker heartbeat
pump, the wake-ups' watchers and poller, the retention purge loop): a daemon thread, a stop flag
its loop waits on between steps, a join bounded by the caller, and a failure logged rather than
lost. The standard library only, so every floor of the package may use it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Self

log = logging.getLogger(__name__)


class Stop:
    """A stop flag to wait on between steps (what the loops use of ``threading.Event``).

    ``threading.Event.wait`` builds a condition and a lock at every call (159 µs of CPU for a
    25 ms wait); a lock held until :meth:`set` waits with one call (72 µs): it counts for the
    sequence watcher, 40 looks a second for the life of the relay.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False
        # Two threads stopping at once must not both release the lock (a RuntimeError, or a
        # waiter's hold released under it).
        self._setting = threading.Lock()

    def set(self) -> None:
        with self._setting:
            if not self._set:
                self._set = True
                self._lock.release()

    def is_set(self) -> bool:
        return self._set

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True at once if (or as soon as) the flag is set."""
        if self._set or seconds <= 0:
            return self._set
        if self._lock.acquire(timeout=seconds):
            self._lock.release()
        return self._set


class Background:
    """Runs ``target`` in a daemon thread named ``name`` from :meth:`start` until it returns or
    :meth:`stop` sets :attr:`_stop`, which ``target`` waits on between steps.

    An exception escaping ``target`` ends the thread, logged with its traceback under the
    thread's name (``threading.excepthook`` would print it on stderr, outside the relay's log).
    """

    def __init__(self, name: str, target: Callable[[], None]) -> None:
        self._stop = Stop()
        # ``target`` is handed to the thread, not kept here: a thread drops its target when it
        # ends, so a finished one holds nothing (``target`` is usually a bound method of the
        # subclass: kept here, it would tie the object into a cycle that only the collector
        # frees, with whatever it holds, a lease keeper's batch of events among them).
        self._thread = threading.Thread(target=self._guarded, args=(target,), name=name)
        self._thread.daemon = True

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Ask the thread to end and wait up to ``timeout`` seconds for it (None: until it has).
        Idempotent; waits for nothing before :meth:`start` or when called from the thread."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _guarded(self, target: Callable[[], None]) -> None:
        try:
            target()
        except Exception:
            log.exception("%s ended on an unexpected error", self._thread.name)


__all__ = ["Background", "Stop"]
