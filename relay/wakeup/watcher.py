"""How a relay learns that rows were committed, without a writer paying for it.

- PostgreSQL (``RELAY_NOTIFY`` on, the default): a :class:`SequenceWatcher` looks at the
  sequence that numbers ``outbox.id`` every ``RELAY_POLL_FLOOR_SECONDS`` (one statement that
  reads no table; :mod:`relay.store.dispatch_path.sequence`); when it moved, it looks for
  claimable rows and wakes the relay if there are some, and keeps looking until every writer
  it saw has ended
  (:class:`relay.wakeup.polling.SequenceWatch`). Any writer is seen, plain SQL in any language
  included, and none runs a trigger or a statement for it: migration 0014 dropped the NOTIFY
  trigger, whose commits PostgreSQL serialises (issue 27). It works through a transaction pooler
  too.
- Elsewhere (MySQL, MariaDB, SQLite, ``RELAY_NOTIFY=0``), or when the sequence cannot be read:
  a :class:`Poller` looks for claimable rows adaptively, floor to ceiling.

Both call their callback from a daemon thread; the caller decides what a wake-up is
(``relay dispatch --loop`` sets the event its loop waits on, Celery beat sends a
``claim_and_dispatch``) and coalesces bursts. A wake-up is a hint, never the data: the claim
decides what there is to do, and the tick is the safety net for any wake-up missed.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from relay.config import timing
from relay.config.urls import normalize_url, redact
from relay.exceptions import StoreError
from relay.policy import Backoff
from relay.store.dispatch_path.sequence import SequenceReader
from relay.store.dispatch_path.store import DispatchStore
from relay.threads import Background
from relay.wakeup.polling import IdlePoll, SequenceWatch, WatchPace

log = logging.getLogger(__name__)


def supports(database_url: str) -> bool:
    """Whether ``database_url`` is a PostgreSQL database (the only one with a watched sequence)."""
    return sa.make_url(normalize_url(database_url)).get_backend_name() == "postgresql"


class SequenceWatcher(Background):
    """Looks at the outbox id sequence every ``floor`` seconds in a daemon thread and calls
    ``on_wake`` when a writer it saw may have committed and rows are claimable (a rolled-back
    insert wakes nothing); ``on_wake`` must be quick and must not raise.

    A look that fails for a passing reason (the database restarting, the connection killed) is
    logged once and retried with backoff; the watcher then starts afresh, with a look for rows
    committed meanwhile. One that retrying cannot mend (no ``SELECT`` on the sequence,
    ``outbox.id`` without a sequence) is logged as an ERROR naming the fix, kept in
    :attr:`error`, and hands over to ``on_unwatchable`` (the runners start a :class:`Poller`).
    """

    def __init__(
        self,
        store: DispatchStore,
        on_wake: Callable[[], None],
        floor: float,
        *,
        idle: float | None = None,
        period: float | None = None,
        on_unwatchable: Callable[[], None] | None = None,
    ) -> None:
        super().__init__("relay-watch", self.run)
        self.store, self.on_wake, self.floor = store, on_wake, floor
        #: When to look (floor after activity, doubling to ``idle``; claims every ``period``
        #: take a look's place): :class:`~relay.wakeup.polling.WatchPace`.
        ceiling = floor if idle is None else max(floor, idle)
        self.pace = WatchPace(floor, ceiling, period, hold=timing.WATCH_HOLD_SECONDS)
        self._pace_lock = threading.Lock()
        self.on_unwatchable = on_unwatchable
        self.reader = SequenceReader(store)
        self.rule = SequenceWatch()
        #: Looks at the sequence so far; looks for rows, and how many found some (each one
        #: woke the relay).
        self.looks = self.probes = self.found = 0
        #: Set while looks succeed; cleared while the database cannot be reached.
        self.watching = threading.Event()
        #: The error that made the watcher give up, if one did.
        self.error: StoreError | None = None
        #: The sequence watched (schema-qualified), once resolved.
        self.sequence: str | None = None
        self._where = redact(store.engine.url.render_as_string(hide_password=True))

    def stop(self, timeout: float | None = 5.0) -> None:
        super().stop(timeout)
        self.reader.close()
        self.store.dispose()

    def run(self) -> None:
        """Look every floor until :meth:`stop`, reconnecting with backoff."""
        backoff = Backoff(timing.WATCH_RETRY_FIRST_SECONDS, timing.WATCH_RETRY_MAX_SECONDS)
        wait, troubled = 0.0, False
        while not self._stop.wait(wait):
            if not troubled and (wait := self._until_due()) > 0:
                continue  # a claim covered the look that was due: the next one is later
            try:
                self.step()
            except StoreError as exc:
                self.watching.clear()
                self.rule.reset()
                if not exc.retryable:
                    self._give_up(str(exc))
                    return
                wait = backoff.next()
                if not troubled:
                    log.warning(
                        "relay wake-up lost the database (%s), looking again in %.1fs: %s",
                        self._where,
                        wait,
                        exc,
                    )
                troubled = True
                continue
            except Exception:  # a bug, or an on_wake that raised: log once, keep watching
                self.rule.reset()
                wait = backoff.next()
                if not troubled:
                    log.exception("relay wake-up failed a look; looking again in %.1fs", wait)
                troubled = True
                continue
            if troubled:
                log.warning("relay wake-up reached the database again; looking for rows")
            troubled = False
            wait = self._until_due()
            backoff.reset()

    def covered(self) -> None:
        """A claim starts now (the relay's own, or the tick's): it finds every row committed
        before it, so it counts as a look (:meth:`WatchPace.covered`)."""
        with self._pace_lock:
            self.pace.covered(time.monotonic())

    def _until_due(self) -> float:
        with self._pace_lock:
            return self.pace.due() - time.monotonic()

    def step(self) -> bool:
        """One look at the sequence and, when the rule asks, one look for rows; returns whether
        it woke the relay."""
        if self.sequence is None:
            self.sequence = self.reader.sequence()
            if self.sequence is None:
                raise StoreError("outbox.id has no sequence (was the table made by relay migrate?)")
            log.info("relay wake-up watching %s (%s)", self.sequence, self._where)
        at = time.monotonic()
        look = self.reader.look(self.sequence)
        self.looks += 1
        self.watching.set()
        wanted = self.rule.observe(look.value, look.xmin)
        with self._pace_lock:
            self.pace.looked(at, active=wanted)
        if self.rule.wants_horizon:
            self.rule.hold(self.reader.horizon())
        if not wanted:
            return False
        self.probes += 1
        # New rows only: expired leases are the claims' (and the tick's) to find.
        if not self.store.backlog(1, expired=False):
            return False
        self.found += 1
        self.on_wake()
        return True

    def _give_up(self, why: str) -> None:
        self.error = StoreError(why)
        log.error(
            "relay wake-up cannot watch %s on %s: %s. Grant the relay's role SELECT on it "
            "(GRANT SELECT ON SEQUENCE %s TO <role>; docs/postgresql.md), or set RELAY_NOTIFY=0; "
            "polling adaptively instead",
            self.sequence or "the outbox id sequence",
            self._where,
            why,
            self.sequence or "outbox_id_seq",
        )
        if self.on_unwatchable is not None:
            self.on_unwatchable()


class Poller(Background):
    """Where nothing is watched (MySQL, MariaDB, SQLite, or ``RELAY_NOTIFY=0``): looks for
    claimable rows in a daemon thread and calls ``on_found`` when there are some.

    It looks ``floor`` seconds after finding rows, doubling the wait after each look that found
    none, up to ``ceiling`` (the tick): idle, it costs one bounded count of the claim index per
    ceiling. A look that fails for a passing reason (the database unreachable; on SQLite, the
    tables not made yet) is logged once per cause and retried at the next one; one that
    retrying cannot mend (a table missing on a server, a permission revoked) stops the poller
    with an ERROR log and is kept in :attr:`error`, instead of the same warning every ceiling
    for ever. Either names `relay migrate` when a table is missing.
    """

    def __init__(
        self, store: DispatchStore, on_found: Callable[[], None], floor: float, ceiling: float
    ) -> None:
        super().__init__("relay-poll", self.run)
        self.store, self.on_found = store, on_found
        # The floor for about one ceiling after rows were seen: workers draining them make
        # the looks meanwhile come back empty, which says nothing about new rows.
        self.poll = IdlePoll(floor, ceiling, hold=math.ceil(ceiling / floor))
        #: Looks so far, and how many found rows.
        self.looks = self.found = 0
        #: The non-retryable error that stopped the poller, if one did.
        self.error: StoreError | None = None

    def stop(self, timeout: float | None = 5.0) -> None:
        """Ask the thread to end and wait for it (it ends within one look)."""
        super().stop(timeout)

    def run(self) -> None:
        failing: str | None = None  # the last failure logged, until a look succeeds
        while not self._stop.wait(self.poll.next()):
            self.looks += 1
            try:
                # New rows only: expired leases are the claims' (and the tick's) to find.
                rows = self.store.backlog(1, expired=False)
            except StoreError as exc:
                if not exc.retryable:
                    self.error = exc
                    log.error("relay poller stopped: looking for new rows cannot succeed: %s", exc)
                    return
                if str(exc) != failing:  # once per cause, not at every look
                    failing = str(exc)
                    log.warning("relay poller could not look for new rows, retrying: %s", exc)
                continue
            if failing is not None:
                failing = None
                log.info("relay poller looking for new rows again")
            if rows:
                self.found += 1
                self.on_found()
                self.poll.reset()


def poll_instead(
    database_url: str,
    on_found: Callable[[], None],
    floor: float,
    ceiling: float,
    **engine_kwargs: Any,
) -> Callable[[], None]:
    """An ``on_unwatchable`` for :class:`SequenceWatcher`: start a :class:`Poller` looking every
    ``floor`` seconds up to ``ceiling`` (``Settings.idle_poll_seconds``), its engine built with
    ``engine_kwargs`` (the dispatch path's deadlines)."""

    def start() -> None:
        Poller(
            DispatchStore.from_url(database_url, **engine_kwargs), on_found, floor, ceiling
        ).start()
        log.warning("relay poller started instead: every %gs to %gs", floor, ceiling)

    return start


__all__ = ["Poller", "SequenceWatcher", "poll_instead", "supports"]
