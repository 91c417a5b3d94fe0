"""The processes a measurement runs: relay, Celery fleet or the benchmark's own workers, started
together, ready-checked, always stopped; and the CPU time they use."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from bench import services

#: What ``relay dispatch --loop`` logs once it has built its store and publisher.
RELAY_READY = "starting"
#: What the benchmark's own workers (naive, SQL-only, raw publishers) print when ready.
BENCH_READY = "bench worker ready"
CELERY = str(Path(sys.executable).with_name("celery"))
_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")

Procs = list[subprocess.Popen[bytes]]


def relay_command() -> list[str]:
    """``relay dispatch --loop`` from this interpreter's environment."""
    script = Path(sys.executable).with_name("relay")
    relay = str(script) if script.exists() else shutil.which("relay")
    if relay is None:
        raise RuntimeError("the `relay` console script is not installed in this environment")
    return [relay, "dispatch", "--loop"]


def module_command(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


class WorkerFailed(RuntimeError):
    """A worker exited early or never became ready; carries the tail of its log."""


@contextlib.contextmanager
def workers(
    argv: Sequence[str],
    env: Mapping[str, str],
    count: int,
    *,
    ready: str,
    ready_timeout: float = 60.0,
    stop_timeout: float = 10.0,
) -> Iterator[Procs]:
    """Start ``count`` copies of ``argv`` and yield once each logged ``ready``; at exit send
    SIGTERM, wait ``stop_timeout`` seconds, then SIGKILL what is left."""
    full_env = {**os.environ, **env}
    logdir = Path(tempfile.mkdtemp(prefix="relay-bench-"))
    procs: Procs = []
    logs: list[Path] = []
    try:
        for i in range(count):
            log = logdir / f"worker-{i}.log"
            logs.append(log)
            with log.open("wb") as out:
                procs.append(
                    subprocess.Popen(list(argv), env=full_env, stdout=out, stderr=subprocess.STDOUT)
                )
        _await_ready(procs, logs, ready, ready_timeout)
        yield procs
    finally:
        _stop(procs, stop_timeout)
        shutil.rmtree(logdir, ignore_errors=True)


@contextlib.contextmanager
def celery_fleet(
    env: Mapping[str, str], workers_count: int, workdir: str | None = None
) -> Iterator[Procs]:
    """One beat and ``workers_count`` solo-pool workers on ``RELAY_QUEUE``, all ready; stopped
    (then killed) at exit, and their task queue deleted. ``workdir``: where Celery runs, which
    it puts first on ``sys.path`` (another revision's source: ``-A relay`` imports that one)."""
    queue = env["RELAY_QUEUE"]
    common = ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"]
    where = [] if workdir is None else ["--workdir", workdir]
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        stack.callback(services.delete_queue, queue, env["RELAY_BROKER_URL"])
        beat = [CELERY, *where, "-A", "relay", "beat", "-l", "INFO", "-s", f"{tmp}/schedule"]
        running = stack.enter_context(workers(beat, env, 1, ready="beat: Starting..."))
        for i in range(workers_count):
            argv = [CELERY, *where, "-A", "relay", "worker", "-n", f"w{i}.{queue}@%h", "-Q", queue]
            argv += ["--pool", "solo", *common]
            running += stack.enter_context(workers(argv, env, 1, ready=" ready."))
        yield running


def check_alive(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is not None:
            raise WorkerFailed(f"worker {p.pid} exited with {p.returncode}")


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds the processes used so far (those gone count nothing)."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / _TICKS_PER_SECOND


def pids_of(pattern: str) -> list[int]:
    """The pids whose command line matches ``pattern`` (``pgrep -f``): a server's processes."""
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def until_signalled() -> threading.Event:
    """An event set by SIGTERM or SIGINT: the stop signal of the benchmark's own workers."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _await_ready(
    procs: Sequence[subprocess.Popen[bytes]], logs: Sequence[Path], ready: str, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    waiting = set(range(len(procs)))
    while waiting:
        for i in list(waiting):
            if procs[i].poll() is not None:
                raise WorkerFailed(f"worker exited with {procs[i].returncode}:\n{_tail(logs[i])}")
            if ready in logs[i].read_text(errors="replace"):
                waiting.discard(i)
        if waiting and time.monotonic() > deadline:
            raise WorkerFailed(f"worker not ready after {timeout:g}s:\n{_tail(logs[min(waiting)])}")
        time.sleep(0.05)


def _stop(procs: Sequence[subprocess.Popen[bytes]], timeout: float) -> None:
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
