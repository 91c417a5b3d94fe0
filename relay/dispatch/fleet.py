"""``relay dispatch --once|--loop`` over several outbox databases (``RELAY_DATABASES``).

One thread per database, each running the single-database loop of
:meth:`relay.dispatch.dispatcher.Dispatcher.loop` with its own store, engine, publisher
connection, circuit breaker and wake-up (a LISTEN/NOTIFY listener on PostgreSQL, adaptive
polling elsewhere). Why threads, not one loop taking the databases in turn: a turn-taking loop
makes a quiet database wait for the busy one's drain budget (seconds) before its first claim,
and a database that is down (connect timeouts, retry backoff) would stall every turn. With a
thread each, a database's wait, backoff or outage is its own; the quiet database's listener
wakes its own thread at once, and the interpreter switches threads every few milliseconds, so
its events are claimed while the other drains (``python -m bench --only fairness``).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Sequence

from relay.config import Settings
from relay.config.databases import each
from relay.dispatch import runner
from relay.dispatch.dispatcher import Dispatcher, Report
from relay.store.dispatch import DispatchStore

log = logging.getLogger("relay")


class DatabaseLoop:
    """One database's relay inside a multi-database process: its dispatcher and its thread."""

    def __init__(
        self,
        name: str,
        settings: Settings,
        build: Callable[[Settings, DispatchStore], Dispatcher],
    ) -> None:
        self.name, self.settings = name, settings
        self.store = DispatchStore.from_settings(settings)
        self.dispatcher = build(settings, self.store)
        self.report = Report()
        #: The error that ended this database's thread, if one did (never a retryable one).
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def once(self) -> None:
        """Drain this database until nothing is claimable."""
        self._guard(lambda: self.report.add(self.dispatcher.drain(budget_seconds=float("inf"))))

    def loop(self, stop: threading.Event, on_pass: Callable[[], None] | None) -> None:
        """Drain until ``stop``, woken by this database's own listener where it has one."""
        until, wake = threading.Event(), threading.Event()

        def on_deaf() -> None:
            until.set()
            wake.set()

        def stopping() -> None:
            stop.wait()
            until.set()
            wake.set()

        threading.Thread(target=stopping, name=f"relay-stop-{self.name}", daemon=True).start()
        watcher = runner.listener(self.settings, wake.set, on_deaf=on_deaf)

        def run() -> None:
            try:
                self.report.add(
                    self.dispatcher.loop(until, wake=wake if watcher else None, on_pass=on_pass)
                )
                if not stop.is_set():
                    self.report.add(self.dispatcher.loop(stop, on_pass=on_pass))
            finally:
                if watcher is not None:
                    watcher.stop()

        self._guard(run)

    def start(self, target: Callable[[], None]) -> None:
        self.thread = threading.Thread(target=target, name=f"relay-{self.name}", daemon=True)
        self.thread.start()

    def _guard(self, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as exc:
            # One database's fatal error ends its own thread, never the others'.
            self.error = exc
            log.error("relay for database %r stopped: %s", self.name, exc)


def run(settings: Settings, *, once: bool, heartbeat_file: str | None = None) -> Report:
    """Every configured database's relay in this process, a thread each, until all drained
    (``once``) or SIGTERM/SIGINT; the sum of their reports."""
    loops = [DatabaseLoop(name, s, runner.dispatcher) for name, s in each(settings)]
    log.info(
        "relay fleet starting over %d databases (%s): %s",
        len(loops),
        ", ".join(d.name for d in loops),
        settings.describe(),
    )
    stop = threading.Event()
    try:
        if once:
            for d in loops:
                d.start(d.once)
        else:
            runner.serve_metrics(loops[0].settings, loops[0].store.engine)

            def on_signal(*_: object) -> None:
                stop.set()

            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, on_signal)
            beat = runner.heartbeat(heartbeat_file)
            for d in loops:
                d.start(lambda d=d: d.loop(stop, beat))  # type: ignore[misc]
        _join(loops, stop)
    finally:
        stop.set()
        for d in loops:
            if d.thread is not None:
                d.thread.join(timeout=settings.lease_seconds)
            runner.shutdown(d.dispatcher)
    total = Report()
    for d in loops:
        log.info("relay for database %r done: %s", d.name, d.report)
        total.add(d.report)
    return total


def _join(loops: Sequence[DatabaseLoop], stop: threading.Event) -> None:
    # Join with a timeout so the main thread keeps taking signals.
    while any(d.thread is not None and d.thread.is_alive() for d in loops):
        for d in loops:
            if d.thread is not None:
                d.thread.join(timeout=0.2)
        if stop.is_set():
            return
