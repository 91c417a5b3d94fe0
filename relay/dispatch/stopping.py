"""SIGTERM obeyed within a bound (:data:`relay.config.timing.STOP_SECONDS`), whatever the relay
waits on.

The first SIGTERM (or SIGINT) asks for a warm stop: the loop finishes the batch in hand,
records it and exits. That needs the database and the broker to answer; a call blocked on a
server that stopped answering (a frozen connection, a broker under a resource alarm that stops
reading) would hold the process for as long as the server stays silent, and Kubernetes kills
the pod after its grace period anyway, with nothing said. So the first signal also arms a
timer: if the process is still running :data:`~relay.config.timing.STOP_FORCE_SHARE` of the
bound later, it logs that it did not stop in time, prints every thread's stack (what it was
waiting on) and exits at once. A second signal does the same without waiting. The rows it held
go back when their leases expire, as after SIGKILL: none is lost, a batch the broker already had
may be sent again.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import sys
import threading
import time

from relay.config import timing

log = logging.getLogger("relay")

#: The exit status of a relay that had to be stopped without finishing (128 + SIGTERM, as a
#: shell reports a process ended by the signal).
FORCED_EXIT_STATUS = 143


class StopGuard:
    """Turns the stop signals of one process into a warm stop with a deadline."""

    def __init__(self, seconds: float | None = None) -> None:
        bound = timing.STOP_SECONDS if seconds is None else seconds
        #: Seconds after the first signal at which the process exits whatever it is doing.
        self.force_after = bound * timing.STOP_FORCE_SHARE
        self._timer: threading.Timer | None = None
        self._since = 0.0

    def signalled(self) -> None:
        """The first call arms the deadline; a later one exits at once. Called from signal
        handlers, which all run in the main thread: no lock (a handler may interrupt one)."""
        if self._timer is None:
            self._since = time.monotonic()
            self._timer = threading.Timer(self.force_after, self._force, ("its deadline",))
            self._timer.name = "relay-stop-deadline"
            self._timer.daemon = True
            self._timer.start()
            return
        self._force("a second stop signal")

    def disarm(self) -> None:
        """The process stopped in time (called once its clean-up is over)."""
        if self._timer is not None:
            self._timer.cancel()

    def _force(self, why: str) -> None:
        waited = time.monotonic() - self._since
        log.error(
            "relay still stopping %.1fs after SIGTERM: exiting on %s without finishing; the "
            "rows it holds go back when their leases expire. Its threads were waiting on:",
            waited,
            why,
        )
        for handler in logging.getLogger().handlers + log.handlers:
            handler.flush()
        # AttributeError, ValueError, OSError: sys.stderr without a file descriptor.
        with contextlib.suppress(AttributeError, ValueError, OSError):
            faulthandler.dump_traceback(all_threads=True)
        sys.stderr.flush()
        os._exit(FORCED_EXIT_STATUS)
