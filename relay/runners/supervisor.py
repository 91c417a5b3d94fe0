"""``relay dispatch --once|--loop`` over several outbox databases (``RELAY_DATABASES``).

One child process per database, each the single-database relay of :func:`relay.runners.loop.run`
(its :class:`~relay.dispatch.runtime.Runtime`) with its own store, engine, publisher connection,
circuit breaker and wake-up (the sequence watcher on PostgreSQL, adaptive polling elsewhere), and
this process supervising them: SIGTERM/SIGINT are passed on (each child in its own process group, so
a terminal's Ctrl-C reaches it once, through here), a child that dies is started again (after a
backoff), and with a heartbeat file each child beats a file of its own (``PATH.<index>``) and the
supervisor gives the shared file the time of the oldest child's beat: one hung child fails liveness
as if it were the only process.

Why a process per database, not one loop taking the databases in turn nor a thread each: a
turn-taking loop makes a quiet database wait for the busy one's drain budget (seconds) before
its first claim, and a database that is down (connect timeouts, retry backoff) stalls every
turn. Threads share one interpreter lock: while the busy database's thread computes (building
and publishing its batches), the quiet one's thread gets the lock back only at the switch
interval after each of its round trips, which measured 5-15x its p99 (``python -m bench --only
fairness``). Processes are scheduled by the operating system, which favours the one that
mostly sleeps, and a crash or a hang of one stays its own.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from relay.config import Settings, timing
from relay.config.databases import each
from relay.config.settings import env_fields, env_name
from relay.dispatch.dispatcher import Report
from relay.observe import heartbeat
from relay.policy import Backoff

log = logging.getLogger("relay")

#: How often the supervisor looks at its children (and touches the heartbeat file).
CHECK_SECONDS = 0.5
#: ``kill -USR1``: the children dump their stacks one after the other, this far apart.
DUMP_GAP_SECONDS = 0.2
#: A child that died is started again after a backoff from the first to the second.
RESTART_FIRST_SECONDS, RESTART_MAX_SECONDS = 1.0, 30.0


def child_env(settings: Settings, index: int, base: Mapping[str, str]) -> dict[str, str]:
    """The environment of one database's relay: ``base`` without any ``RELAY_*``, plus every
    setting of ``settings`` (that database's view) spelled out; with ``RELAY_METRICS_PORT``,
    the ``index``-th database serves its metrics on that port plus ``index``."""
    env = {k: v for k, v in base.items() if not k.startswith("RELAY_")}
    for f in env_fields():
        value = getattr(settings, f.name)
        if value is None or f.name == "databases":
            continue
        if f.name == "metrics_port":
            value += index
        if isinstance(value, bool):
            value = "1" if value else "0"
        env[env_name(f)] = str(value)
    return env


@dataclass
class Child:
    """One database's relay process."""

    name: str
    env: dict[str, str]
    once: bool
    proc: subprocess.Popen[bytes] | None = None
    backoff: Backoff = field(
        default_factory=lambda: Backoff(RESTART_FIRST_SECONDS, RESTART_MAX_SECONDS)
    )
    restart_at: float = 0.0
    #: The child's own heartbeat file (``--loop`` with a heartbeat file only).
    heartbeat_file: str | None = None

    def start(self) -> None:
        mode = "--once" if self.once else "--loop"
        argv = [sys.executable, "-m", "relay", "dispatch", mode]
        if self.heartbeat_file is not None:
            argv += ["--heartbeat-file", self.heartbeat_file]
            # A start counts as a beat: a child gets the liveness bound to come up.
            heartbeat.touch(self.heartbeat_file)
        # Our own interpreter and arguments (S603); preexec_fn only sets signal dispositions.
        self.proc = subprocess.Popen(  # noqa: S603
            argv, env=self.env, preexec_fn=_prepare_child, process_group=0
        )
        log.info("relay for database %r started (pid %d)", self.name, self.proc.pid)

    def last_beat(self) -> float:
        """When the child last beat (its heartbeat file's time); 0 when it never did."""
        try:
            return os.stat(self.heartbeat_file).st_mtime if self.heartbeat_file else 0.0
        except OSError:
            return 0.0

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def _prepare_child() -> None:
    """In the child before exec: SIGUSR1 ignored until the relay sets its stack dump (the
    supervisor passes the signal on, and one that reached a relay still starting would end it
    by default), and the death signal."""
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    _die_with_parent()


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the supervisor dies, even of a SIGKILL (Linux),
    so no database's relay outlives it unsupervised."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


#: prctl(2) option: the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1


def run(settings: Settings, *, once: bool, heartbeat_file: str | None = None) -> Report:
    """Every configured database's relay as a child process, until all drained (``once``) or
    SIGTERM/SIGINT. Raises ``SystemExit`` with the worst child's status when one failed in
    ``once`` mode."""
    children: list[Child] = []
    # The shared heartbeat file takes the time of the child that beat last longest ago (a
    # child being restarted keeps the time of its start).
    beat = heartbeat.oldest(
        heartbeat_file,
        timing.liveness_seconds(settings.lease_seconds, settings.confirm_timeout_seconds),
        lambda: [c.last_beat() for c in children],
    )
    children += [
        Child(name, child_env(s, i, os.environ), once) for i, (name, s) in enumerate(each(settings))
    ]
    if heartbeat_file and not once:
        for i, c in enumerate(children):
            c.heartbeat_file = f"{heartbeat_file}.{i}"
    log.info(
        "relay fleet starting over %d databases (%s): %s",
        len(children),
        ", ".join(c.name for c in children),
        settings.describe(),
    )
    stop = threading.Event()

    def on_signal(*_: object) -> None:
        stop.set()

    def on_dump(*_: object) -> None:  # kill -USR1: this process's stacks, then each child's
        faulthandler.dump_traceback(all_threads=True)
        threading.Thread(
            target=_dump_children, args=(list(children),), name="relay-dump", daemon=True
        ).start()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, on_dump)
    try:
        for c in children:
            c.start()
        if once:
            codes = [c.proc.wait() for c in children if c.proc is not None]
            worst = max(codes, default=0)
            if worst:
                raise SystemExit(worst)
            return Report()
        _supervise(children, stop, beat)
    finally:
        _stop(children, timing.STOP_SECONDS * timing.STOP_FORCE_SHARE + STOP_MARGIN_SECONDS)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return Report()


def _dump_children(children: list[Child]) -> None:
    """SIGUSR1 to each running child, :data:`DUMP_GAP_SECONDS` apart: a child writes its stacks
    in many small writes, so two dumping at once into the stderr they share would interleave
    mid-line (seen: unreadable, and a test that looked for a frame missed it)."""
    for c in children:
        if c.running and c.proc is not None:
            c.proc.send_signal(signal.SIGUSR1)
            time.sleep(DUMP_GAP_SECONDS)


def _supervise(
    children: list[Child], stop: threading.Event, beat: Callable[[], None] | None
) -> None:
    while not stop.wait(CHECK_SECONDS):
        now = time.monotonic()
        for c in children:
            if c.running:
                continue
            if c.restart_at == 0.0:
                code = c.proc.returncode if c.proc is not None else None
                delay = c.backoff.next()
                log.error(
                    "relay for database %r exited (%s); starting it again in %.1fs",
                    c.name,
                    code,
                    delay,
                )
                c.restart_at = now + delay
            elif now >= c.restart_at:
                c.restart_at = 0.0
                c.start()
        if beat is not None:
            beat()


#: After SIGTERM a child exits on its own deadline; the supervisor kills it this much later.
STOP_MARGIN_SECONDS = 0.5


def _stop(children: list[Child], timeout: float) -> None:
    for c in children:
        if c.running and c.proc is not None:
            c.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for c in children:
        if c.proc is None:
            continue
        try:
            c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            c.proc.kill()
            c.proc.wait()
