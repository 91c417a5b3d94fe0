"""When the outbox trigger notifies: the :class:`Gate` a :class:`relay.dispatch.listener.Listener`
keeps, so that writers pay for a wake-up only while the relay is idle.

A transaction that issued ``NOTIFY`` commits under one instance-wide lock, so notifying writers
commit one at a time. The gate keeps the trigger's flag (:class:`relay.store.wakeup.WakeupFlag`)
off while rows keep coming and looks for them itself, at the poll floor, instead:

- **polling** (flag off): look every floor; rows found -> wake the relay. After
  :data:`QUIET_LOOKS` empty looks in a row the outbox is quiet: turn the flag on and settle.
- **settling** (flag on): keep looking every floor until every transaction that was open when
  the flag went on has ended (it may have read the flag off and commit without notifying), or a
  tick has passed (a long transaction then waits for the tick, as it did before), then
  **listening**: only notifications wake the relay.
- A notification, or rows found while settling, turns the flag off and goes back to polling.

Several listeners share the one flag. Each turns it on only on its way to listening and off
only on its way to polling, so the last one to write it is in the matching state: the flag is
never off while every listener waits for a notification. A listener that stops turns it off and
NOTIFYs once, so the others look and turn it on again if they are idle. A flag left on by a
listener that was killed costs writers throughput (each commit notifies, as before migration
0011) until a listener is notified, never latency; one left off is mended by the next
listener's looks.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable

from relay.config import Settings
from relay.exceptions import StoreError
from relay.store.dispatch import Store
from relay.store.wakeup import WakeupFlag

log = logging.getLogger(__name__)

#: Empty looks in a row, a floor apart, before an idle relay asks writers to notify it.
QUIET_LOOKS = 4
#: The defaults of ``RELAY_POLL_FLOOR_SECONDS`` and ``RELAY_TICK_SECONDS`` with ``RELAY_NOTIFY``.
DEFAULT_FLOOR_SECONDS, DEFAULT_SETTLE_SECONDS = 0.025, 1.0


class Mode(enum.Enum):
    #: Flag off; the gate looks for rows every floor.
    POLLING = "polling"
    #: Flag on; still looking until the writers that read it off have committed.
    SETTLING = "settling"
    #: Flag on; notifications alone wake the relay.
    LISTENING = "listening"


class Gate:
    """One listener's side of the wake-up flag; see the module docstring. Not thread-safe: the
    listener's thread alone calls it."""

    def __init__(
        self,
        store: Store,
        floor: float,
        settle_seconds: float,
        *,
        quiet_looks: int = QUIET_LOOKS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.floor, self.settle_seconds = store, floor, settle_seconds
        self.quiet_looks, self.clock = quiet_looks, clock
        self.flag = WakeupFlag(store)
        self.mode = Mode.POLLING
        #: Looks so far, and how often the flag was turned on (the relay went idle).
        self.looks = self.rests = 0
        self._empty = 0
        self._horizon = 0
        self._settle_until = 0.0
        self._legacy = False

    @classmethod
    def from_settings(cls, settings: Settings) -> Gate:
        """Looks every ``RELAY_POLL_FLOOR_SECONDS``, settles for at most ``RELAY_TICK_SECONDS``."""
        store = Store.from_url(settings.database_url)
        return cls(store, settings.poll_floor_seconds, settings.tick_seconds)

    def reset(self) -> None:
        """A new LISTEN session: what happened before it is unknown, so poll."""
        self.mode, self._empty = Mode.POLLING, 0

    def timeout(self, slice_seconds: float) -> float:
        """How long the listener may wait for a notification before :meth:`look`."""
        return slice_seconds if self.mode is Mode.LISTENING else self.floor

    def notified(self) -> None:
        """A notification arrived: the relay is about to drain, so writers stop notifying."""
        if self.mode is not Mode.POLLING and not self._legacy:
            self._poll()

    def look(self) -> bool:
        """One look when the wait timed out; True: there are rows, wake the relay."""
        if self.mode is Mode.LISTENING or self._legacy:
            return False
        self.looks += 1
        try:
            return self._look()
        except StoreError as exc:
            if exc.retryable:
                log.warning("relay listener could not look for new rows: %s", exc)
                return False
            # No relay_wakeup (a database not migrated to 0011): its trigger always notifies.
            log.warning("no wake-up flag, listening only (run `relay migrate`): %s", exc)
            self._legacy, self.mode = True, Mode.LISTENING
            return False

    def _look(self) -> bool:
        if self.mode is Mode.SETTLING:
            settled = self.flag.ended(self._horizon) or self.clock() >= self._settle_until
            if self.store.backlog(1, expired=False):
                self._poll()
                return True
            if settled:
                self.mode = Mode.LISTENING
            return False
        if self.store.backlog(1, expired=False):
            self._empty = 0
            return True
        self._empty += 1
        if self._empty >= self.quiet_looks:
            self._horizon = self.flag.on()
            self._settle_until = self.clock() + self.settle_seconds
            self.mode, self.rests = Mode.SETTLING, self.rests + 1
        return False

    def close(self) -> None:
        """The listener stops: writers stop notifying it, and the listeners still running are
        rung, so that any of them that waited for notifications looks and turns the flag on
        again. Best effort: a flag left on costs writers throughput, never an event."""
        if self._legacy:
            return
        try:
            self.flag.off()
            self.flag.ring()
        except StoreError as exc:
            log.warning("relay listener could not turn the wake-up flag off: %s", exc)
        self.store.dispose()

    def _poll(self) -> None:
        self.mode, self._empty = Mode.POLLING, 0
        try:
            self.flag.off()
        except StoreError as exc:  # the flag stays on: writers keep notifying, nothing is lost
            log.warning("relay listener could not turn the wake-up flag off: %s", exc)
