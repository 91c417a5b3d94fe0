"""Wake-ups: a ``claim_and_dispatch`` sent soon after events were committed, so they need not
wait for the tick.

:func:`enable_wakeup` sends one after each ``relay.enqueue`` commit of this process;
:func:`watch_in_beat` has beat send them for the whole deployment, from what one watcher of
the database sees. Both go through a :class:`Waker`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from celery import Celery, signals

from relay.celery.names import CLAIM_AND_DISPATCH, TICK
from relay.config import Settings
from relay.config.databases import Fleet
from relay.produce import enqueue as producer

log = logging.getLogger(__name__)


class Waker:
    """Sends one ``claim_and_dispatch`` after a commit, from a background thread.

    The commit only sets an event, so a slow or dead broker never holds the caller's commit;
    wake-ups arriving while one is being sent coalesce into one more, and with ``min_interval``
    so do those arriving within that long after a send (the beat watcher's bound on a burst:
    at most one task per interval). A failed send is logged: the tick picks the events up
    instead.
    """

    def __init__(
        self,
        app: Celery,
        settings: Settings,
        min_interval: float = 0.0,
        *,
        one_queued: bool = False,
        source: str | None = None,
    ) -> None:
        self.app, self.settings, self.min_interval = app, settings, min_interval
        #: The database (of ``RELAY_DATABASES``) the tasks it sends drain; None: the only one.
        self.source = source
        #: Send nothing while a relay task already waits in ``RELAY_QUEUE`` (it will drain what
        #: this wake-up is for): under steady load the beat watcher keeps at most one queued.
        self.one_queued = one_queued
        #: Wake-up tasks sent so far by this process, and those left out because one waited.
        self.sent = self.skipped = 0
        self._conn: Any = None
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def __call__(self) -> None:
        if self._thread is None or self._pid != os.getpid():
            self._start()
        self._wanted.set()

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None and self._pid == os.getpid():
                return
            # After a fork the parent's thread does not exist here: start this process's own.
            self._wanted = threading.Event()
            self._thread = threading.Thread(target=self._run, name="relay-wake", daemon=True)
            self._pid = os.getpid()
            self._thread.start()

    def _run(self) -> None:
        last = -math.inf
        while True:
            self._wanted.wait()
            gap = last + self.min_interval - time.monotonic()
            if gap > 0:
                time.sleep(gap)  # the rate limit; wake-ups meanwhile fold into this one
            self._wanted.clear()
            last = time.monotonic()
            if self.one_queued and self._queued():
                self.skipped += 1
                continue
            try:
                self.app.send_task(
                    CLAIM_AND_DISPATCH,
                    args=(self.source,) if self.source else (),
                    queue=self.settings.queue,
                    expires=self.settings.tick_seconds,
                    retry=False,
                )
                self.sent += 1
            except Exception as exc:
                log.warning("relay wake-up not sent, the tick will relay the events: %s", exc)

    def _queued(self) -> int:
        """Messages waiting in ``RELAY_QUEUE`` (a passive declare); 0 when that fails."""
        try:
            if self._conn is None:
                self._conn = self.app.connection_for_write()
            declared = self._conn.default_channel.queue_declare(
                queue=self.settings.queue, passive=True
            )
            return int(declared.message_count)
        except Exception:
            # The queue is not declared yet, or the connection broke: send, and reconnect next
            # time.
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                conn.close()
            return 0


def watch_in_beat(app: Celery, fleet: Fleet) -> Callable[..., None]:
    """The ``beat_init`` handler that starts the deployment's one watcher in ``app``'s beat and
    turns what it sees into ``claim_and_dispatch`` tasks of ``fleet``'s databases, at most one per
    ``RELAY_POLL_FLOOR_SECONDS``, so wake-ups never multiply with commits or workers.

    On PostgreSQL with ``RELAY_NOTIFY`` on the watcher is a
    :class:`relay.wakeup.watcher.SequenceWatcher` (on ``RELAY_LISTEN_URL`` when set); elsewhere,
    or when it cannot read the outbox id sequence, a :class:`relay.wakeup.watcher.Poller` looks
    for claimable rows adaptively, floor to tick. Over several databases, one
    :class:`relay.wakeup.serverwatch.ServerWatcher` per PostgreSQL server (one connection each)
    wakes the databases that took rows. A second beat by mistake watches too: its wake-ups are
    as harmless as its ticks."""

    def start(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", app) is not app:
            return
        from relay.dispatch.runtime import Runtime

        if not fleet.several:
            # The one database: RELAY_DATABASE_URL's, or the only entry of RELAY_DATABASES.
            only = fleet.members[0]
            s = only.settings
            waker = Waker(app, s, min_interval=s.poll_floor_seconds, one_queued=True)
            watcher = Runtime(only.name, s).watcher(waker)
            covered = getattr(watcher, "covered", None)
            if covered is not None:
                # The tick beat sends is a claim: it takes the place of one of the watcher's
                # idle looks (relay.wakeup.polling.WatchPace) instead of adding to them.
                def on_publish(sender: Any = None, **_: Any) -> None:
                    if sender == TICK:
                        covered()

                signals.before_task_publish.connect(on_publish, weak=False)
            return
        # One watcher per PostgreSQL *server* (not per database), waking each database's own
        # drain; a queued task of another database drains nothing of this one, so no
        # one_queued here. The other databases are the tick's to count (every tick).
        from relay.wakeup.serverwatch import server_watches

        wakers = {
            m.name: Waker(
                app, m.settings, min_interval=m.settings.poll_floor_seconds, source=m.name
            )
            for m in fleet.members
        }

        def wake(names: tuple[str, ...]) -> None:
            for name in names or tuple(wakers):
                wakers[name]()

        for watch in server_watches(fleet, wake):
            watch.start()

    return start


def enable_wakeup(app: Celery, settings: Settings) -> Waker:
    """Make ``relay.enqueue`` send a ``claim_and_dispatch`` through ``app`` after each commit."""
    waker = Waker(app, settings)
    producer.configure(wake=waker)
    return waker
