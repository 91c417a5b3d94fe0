"""``relay dispatch --once|--loop`` over one database: its :class:`~relay.dispatch.runtime.
Runtime` driven by one loop, with the wake-up watcher (or adaptive polling), the heartbeat file,
the retention purge in a thread and the metrics endpoint. A process per database
(:mod:`relay.runners.supervisor`) runs this in each child."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

from relay.config import Settings, timing
from relay.config.database_list import DEFAULT_NAME
from relay.dispatch.cycle import Report
from relay.dispatch.runtime import Runtime
from relay.dispatch.stopping import StopGuard
from relay.observe import heartbeat
from relay.runners.process import dump_stacks_on, serve_metrics, settle_heap

# The CLI's own logger: `relay dispatch` has always logged its start and end under "relay".
log = logging.getLogger("relay")


def run(settings: Settings, *, once: bool, heartbeat_file: str | None = None) -> Report:
    """A relay process without Celery: drain once, or drain until SIGTERM/SIGINT with the
    wake-up watcher (or adaptive polling), the heartbeat file and the metrics endpoint."""
    dump_stacks_on(signal.SIGUSR1)
    # Armed by the loop's first stop signal; covers the clean-up (the runtime's close) too.
    guard = StopGuard()
    try:
        with Runtime(DEFAULT_NAME, settings) as runtime:
            relay = runtime.dispatcher()
            if not once:
                settle_heap()  # a process that relays until stopped
            log.info("relay %s starting: %s", relay.worker_id, settings.describe())
            if once:
                report = relay.drain(budget_seconds=float("inf"))
            else:
                beat = heartbeat.beats(
                    heartbeat_file,
                    timing.liveness_seconds(
                        settings.lease_seconds, settings.confirm_timeout_seconds
                    ),
                )
                report = _loop(runtime, beat, guard)
    finally:
        guard.disarm()
    log.info("relay %s done: %s", relay.worker_id, report)
    return report


def _loop(runtime: Runtime, beat: Callable[[], None] | None, guard: StopGuard) -> Report:
    settings, relay = runtime.settings, runtime.dispatcher()
    serve_metrics(settings, runtime.operations())
    # ``until`` ends the watched phase: on a signal, or when the watcher finds it cannot read
    # the sequence (a missing privilege); the loop then polls as with RELAY_NOTIFY=0.
    stop, wake, until = threading.Event(), threading.Event(), threading.Event()

    def on_signal(*_: object) -> None:
        guard.signalled()
        stop.set()
        until.set()
        wake.set()

    def on_unwatchable() -> None:
        until.set()
        wake.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    watching = runtime.wake_watcher(wake.set, on_unwatchable=on_unwatchable)
    if watching is None:
        log.info(
            "no sequence to watch here: polling every %gs to %gs",
            settings.poll_floor_seconds,
            settings.idle_poll_seconds,
        )
    retention = runtime.purge_loop()
    try:
        covered = None if watching is None else watching.covered
        report = relay.loop(until, wake=wake if watching else None, on_pass=beat, on_claim=covered)
        if not stop.is_set():
            report.add(relay.loop(stop, on_pass=beat))
        return report
    finally:
        retention.stop()
        if watching is not None:
            watching.stop()
