"""The many-databases wake-up: one watcher per PostgreSQL *server*, not per database.

It reads how many rows each of the server's relayed databases has inserted
(:class:`relay.store.dispatch_path.serverstats.ServerStats`, one statement on one connection)
and wakes the databases whose count moved; the scheduler then claims there only. It looks every
``RELAY_POLL_FLOOR_SECONDS`` while counts move and for a second after, then backs off, doubling,
to ``RELAY_WATCH_IDLE_SECONDS`` (:class:`relay.wakeup.polling.WatchPace`, as the one-database
watcher): an idle server costs four looks a second, not forty.
A count moves late when the writer's session reported its statistics less than a second
before (PostgreSQL reports then within 10 s), so the scheduler also polls the databases busy
lately (:mod:`relay.runners.many.schedule`). When the watcher loses its server it wakes every
database (rows may have come meanwhile) and looks again with backoff.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from relay.config import timing
from relay.config.databases import Fleet
from relay.config.urls import redact
from relay.exceptions import StoreError
from relay.policy import Backoff
from relay.store.dispatch_path.serverstats import ServerStats, changed
from relay.store.engine import APPLICATION_NAME, create_engine
from relay.threads import Background
from relay.wakeup.polling import WatchPace

log = logging.getLogger(__name__)


def server_watches(fleet: Fleet, on_wake: Callable[[tuple[str, ...]], None]) -> list[ServerWatcher]:
    """One :class:`ServerWatcher` (not started) per PostgreSQL server of ``fleet`` that a
    wake-up watches (``RELAY_NOTIFY`` on); none otherwise."""
    floor, idle = fleet.settings.poll_floor_seconds, fleet.settings.watch_idle_seconds
    return [
        ServerWatcher(s.address, s.url, s.datnames, on_wake, floor, idle=idle)
        for s in fleet.watched
    ]


def stats_by_server(fleet: Fleet) -> list[tuple[ServerStats, dict[str, str]]]:
    """A reader of the written-rows figures (:class:`ServerStats` with ``written``) for each
    PostgreSQL server of ``fleet``, each with its database names (database name -> relay
    name); it connects when read, and is closed after each read by its caller."""
    return [
        (ServerStats(_engine(s.url), list(s.datnames), written=True), dict(s.datnames))
        for s in fleet.postgresql
    ]


def _engine(url: Any) -> Any:
    # abandon_calls: a look at a server that acknowledges and never answers is abandoned by
    # the watchdog at the dispatch path's call deadline, like the store's own calls.
    return create_engine(
        url.render_as_string(hide_password=False),
        connect_args={"application_name": APPLICATION_NAME},
        abandon_calls=True,
    )


class ServerWatcher(Background):
    """Watches one server's databases (``datnames``: database name -> relay name) in a daemon
    thread, calling ``on_wake`` with the relay names of those that inserted rows, or with
    ``()`` when it cannot tell (it lost the server). It looks every ``floor`` seconds while
    counts move, backing off to ``idle`` (None: ``floor``) when they do not."""

    def __init__(
        self,
        server: str,
        url: Any,
        datnames: Mapping[str, str],
        on_wake: Callable[[tuple[str, ...]], None],
        floor: float = 0.025,
        *,
        idle: float | None = None,
    ) -> None:
        super().__init__("relay-server-watch", self._run)
        self.server, self.datnames, self.on_wake, self.floor = (
            server,
            dict(datnames),
            on_wake,
            floor,
        )
        self.stats = ServerStats(_engine(url), list(self.datnames))
        ceiling = floor if idle is None else max(floor, idle)
        #: When to look: the floor while counts move, doubling to ``idle`` while they do not.
        self.pace = WatchPace(floor, ceiling, hold=timing.WATCH_HOLD_SECONDS)
        #: Holds its one connection to the server.
        self.connected = False
        #: Looks so far, and wake-ups sent.
        self.looks = self.woken = 0

    def stop(self, timeout: float | None = 5.0) -> None:
        super().stop(timeout)
        self.stats.close()
        self.connected = False

    def _run(self) -> None:
        backoff = Backoff(timing.WATCH_RETRY_FIRST_SECONDS, timing.WATCH_RETRY_MAX_SECONDS)
        before: dict[str, int] | None = None
        wait = 0.0
        while not self._stop.wait(wait):
            at = time.monotonic()
            try:
                now = self.stats.inserted()
            except StoreError as exc:
                self.connected = False
                wait = backoff.next()
                if before is not None:
                    log.warning(
                        "relay wake-up lost server %s, looking again in %.1fs: %s",
                        redact(self.server),
                        wait,
                        exc,
                    )
                    self.on_wake(())
                before = None
                continue
            self.connected = True
            self.looks += 1
            backoff.reset()
            moved: tuple[str, ...] = ()
            if before is None:
                self.on_wake(())  # back (or first): rows may have come while it looked away
            else:
                moved = tuple(self.datnames[d] for d in changed(before, now) if d in self.datnames)
                if moved:
                    self.woken += 1
                    self.on_wake(moved)
            self.pace.looked(at, active=bool(moved))
            before, wait = now, max(0.0, self.pace.due() - time.monotonic())
