"""The after-commit wake-up of a SQLAlchemy Session or Connection (sync, and the sync side of
an ``AsyncSession``/``AsyncConnection``): ``wake`` is called once after the transaction that
enqueued commits, however many events it wrote, and forgotten on a rollback.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, event
from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

#: Called once after a transaction that enqueued events commits.
WakeUp = Callable[[], None]


def call_wake(wake: WakeUp) -> None:
    """Call an after-commit wake-up; a failure is logged, never raised into the caller."""
    try:
        wake()
    except Exception:  # the commit happened; a lost wake-up only costs one tick of latency
        log.warning(
            "relay wake-up after commit failed; the tick will pick the events up", exc_info=True
        )


class _WakeArm:
    """One Session's or Connection's pending wake-up, with its listeners installed once."""

    __slots__ = ("__weakref__", "pending")

    def __init__(self) -> None:
        self.pending: WakeUp | None = None

    def after_commit(self, *_: Any) -> None:
        """Session: the commit is done."""
        pending, self.pending = self.pending, None
        if pending is not None:
            call_wake(pending)

    def at_commit(self, conn: Connection) -> None:
        """Connection: the commit is about to happen (Core has no after-commit event), so the
        wake-up waits on a helper thread until the root transaction is over."""
        pending, self.pending = self.pending, None
        transaction = conn.get_transaction()
        if pending is not None and transaction is not None:
            _AFTER_COMMIT.put((transaction, pending))

    def forget(self, *_: Any) -> None:
        self.pending = None


class _AfterCommit:
    """A daemon thread that calls each wake-up once its transaction stopped being active.

    Without it a Core connection's wake-up could reach a relay worker before the row is
    committed: the claim would find nothing and the event would wait for the tick.
    """

    #: Longest wait for one commit; a commit slower than this wakes the relay before it lands
    #: (the tick is still the safety net).
    WAIT_SECONDS = 2.0
    POLL_SECONDS = 0.0002

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[sa.RootTransaction, WakeUp]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pid = 0

    def put(self, item: tuple[sa.RootTransaction, WakeUp]) -> None:
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():  # first use, or a forked child: start its thread
                    self._queue = queue.SimpleQueue()
                    thread = threading.Thread(target=self._run, name="relay-after-commit")
                    thread.daemon = True
                    thread.start()
                    self._pid = os.getpid()
        self._queue.put(item)

    def _run(self) -> None:
        items = self._queue
        while True:
            transaction, wake = items.get()
            deadline = time.monotonic() + self.WAIT_SECONDS
            while transaction.is_active and time.monotonic() < deadline:
                time.sleep(self.POLL_SECONDS)
            call_wake(wake)


_AFTER_COMMIT = _AfterCommit()


#: Keyed by the Session or Connection *object*. Not ``info``: a Connection's ``info`` belongs to
#: the pooled DBAPI connection and outlives it, so a flag kept there would leave every later
#: Connection on that pooled connection (each ``engine.begin()``) without listeners.
_ARMS: weakref.WeakKeyDictionary[Session | Connection, _WakeArm] = weakref.WeakKeyDictionary()


def arm(target: Session | Connection, wake: WakeUp) -> None:
    """Call ``wake`` once after the transaction commits, however many events it wrote.

    The listeners are installed once per Session/Connection object and stay (removing a
    listener from inside an event is not allowed); the arm's ``pending`` does the debouncing.
    A Session fires after its outermost commit; a Connection once the commit of its root
    transaction is over (a savepoint's release is not a commit); both forget on a rollback.
    """
    arm = _ARMS.get(target)
    if arm is None:
        arm = _ARMS[target] = _WakeArm()
        if isinstance(target, Session):
            event.listen(target, "after_commit", arm.after_commit)
            event.listen(target, "after_rollback", arm.forget)
        else:
            event.listen(target, "commit", arm.at_commit)
            event.listen(target, "rollback", arm.forget)
    arm.pending = wake
