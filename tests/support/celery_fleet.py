"""Real ``celery -A relay worker|beat`` processes for the acceptance tests and benchmarks.

Each process runs from this interpreter's environment with the ``RELAY_*`` variables of one
test (its own database, exchange and Celery queue), logs to a file, and is always stopped: SIGTERM,
then SIGKILL to its whole process group if it does not exit in time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import kombu
import sqlalchemy as sa

from relay.store.schema.tables import outbox
from tests.support.env import wait_until

CELERY_BIN = str(Path(sys.executable).with_name("celery"))
#: Runs from here so `-A relay` imports this checkout and `./celeryconfig.py` is on the path.
ROOT = Path(__file__).resolve().parents[2]


def unique_queue() -> str:
    return f"relay.test.q.{uuid.uuid4().hex[:10]}"


class Proc:
    """One Celery process and its log file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.popen = subprocess.Popen(
            args,
            env=env,
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so teardown reaches its children
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 60.0) -> None:
        def seen() -> bool:
            if self.popen.poll() is not None:
                raise AssertionError(f"{self.name} exited early:\n{self.log()[-3000:]}")
            return text in self.log()

        wait_until(seen, timeout, f"{self.name} to log {text!r}")

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM (a warm shutdown), then SIGKILL to the group after ``timeout``."""
        self.signal(signal.SIGTERM)
        try:
            code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            code = -9
        with suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # stray children of a prefork pool
        self.popen.wait()
        self._log.close()  # idempotent: a process that exited on its own still has its file
        return code


class Fleet:
    """Starts ``celery -A relay`` workers and beats; :meth:`close` stops every one."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env, self.log_dir = env, log_dir
        self.procs: list[Proc] = []

    def worker(self, name: str, *extra: str, ready: bool = True) -> Proc:
        queue = self.env["RELAY_QUEUE"]
        args = [CELERY_BIN, "-A", "relay", "worker", "-n", f"{name}.{queue}@%h", "-l", "INFO"]
        args += ["--without-gossip", "--without-mingle", "--without-heartbeat", "-Q", queue]
        proc = self._start(name, [*args, *(extra or ("--pool", "solo"))])
        if ready:
            proc.wait_for_log(" ready.")
        return proc

    def beat(self, name: str = "beat") -> Proc:
        schedule = self.log_dir / f"{name}-schedule"
        proc = self._start(name, [CELERY_BIN, "-A", "relay", "beat", "-l", "INFO", "-s", schedule])
        proc.wait_for_log("beat: Starting...")
        return proc

    def _start(self, name: str, args: Iterable[object]) -> Proc:
        proc = Proc(name, [str(a) for a in args], self.env, self.log_dir)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            proc.stop()
        for proc in self.procs:
            tail = "\n".join(proc.log().splitlines()[-15:])
            print(f"--- {proc.name} (exit {proc.popen.returncode}) ---\n{tail}")


@contextmanager
def fleet(env: dict[str, str], log_dir: Path) -> Iterator[Fleet]:
    f = Fleet(env, log_dir)
    try:
        yield f
    finally:
        f.close()
        delete_queue(env["RELAY_BROKER_URL"], env["RELAY_QUEUE"])


def delete_queue(broker_url: str, queue: str) -> None:
    """Remove a test's Celery queue from the broker (RabbitMQ queue or Redis list)."""
    with kombu.Connection(broker_url) as conn, suppress(*conn.channel_errors):
        kombu.Queue(queue, channel=conn.default_channel).delete()


def insert_rows(
    engine: sa.Engine, n: int, event_type: str = "fleet.event", *, commit: bool = True
) -> list[int]:
    """``n`` rows written with plain SQL in one transaction; rolled back unless ``commit``."""
    rows: list[dict[str, Any]] = [{"event_type": event_type, "payload": {"n": i}} for i in range(n)]
    with engine.connect() as conn:
        ids = list(conn.execute(sa.insert(outbox).returning(outbox.c.id), rows).scalars())
        if commit:
            conn.commit()
        else:
            conn.rollback()
    return ids


def counts(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        result = conn.execute(sa.select(outbox.c.status, sa.func.count()).group_by(outbox.c.status))
        return {status: int(n) for status, n in result}
