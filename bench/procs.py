"""Worker processes for a measurement: started together, ready-checked, always stopped."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

#: What ``relay dispatch --loop`` logs once it has built its store and publisher.
RELAY_READY = "starting"
#: What the benchmark's own workers (naive, SQL-only) print when their loop begins.
BENCH_READY = "bench worker ready"


def relay_command() -> list[str]:
    """``relay dispatch --loop`` from this interpreter's environment."""
    script = Path(sys.executable).with_name("relay")
    relay = str(script) if script.exists() else shutil.which("relay")
    if relay is None:
        raise RuntimeError("the `relay` console script is not installed in this environment")
    return [relay, "dispatch", "--loop"]


def module_command(module: str) -> list[str]:
    return [sys.executable, "-m", module]


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
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start ``count`` copies of ``argv`` and yield once each logged ``ready``; at exit send
    SIGTERM, wait ``stop_timeout`` seconds, then SIGKILL what is left."""
    full_env = {**os.environ, **env}
    logdir = Path(tempfile.mkdtemp(prefix="relay-bench-"))
    procs: list[subprocess.Popen[bytes]] = []
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


def check_alive(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is not None:
            raise WorkerFailed(f"worker {p.pid} exited with {p.returncode}")


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
