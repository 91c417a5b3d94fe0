"""A relay fleet of ``relay dispatch --loop`` processes, a steady producer, and the final audit.

Reusable by any acceptance test: start N workers on one outbox database, kill, pause or restart
them, feed them events from a thread while faults happen, then check that every committed event
was delivered, none lost, none left ``processing``, duplicates within a bound.
"""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.store.schema.tables import outbox, sent_counts
from tests.support.broker import Collector
from tests.support.env import relay_env

RELAY_BIN = str(Path(sys.executable).with_name("relay"))

#: Batches one worker can have confirmed by the broker but not yet recorded: the pipelined drain
#: records batch N-1 while batch N publishes (relay.dispatch.dispatcher.Dispatcher.drain). A worker
#: hit by a fault can therefore cause up to this many batches of duplicates.
IN_FLIGHT_BATCHES = 2


#: Fast leases, backoffs and polling, suited to tests.
TEST_SETTINGS: dict[str, object] = {
    "batch_size": 100,
    "lease_seconds": 3,
    "confirm_timeout_seconds": 2,
    "max_attempts": 5,
    "backoff_base_seconds": 0.1,
    "backoff_max_seconds": 1,
    "tick_seconds": 0.1,
}


def fleet_env(
    database_url: str, broker_url: str, exchange: str, **overrides: object
) -> dict[str, str]:
    """The environment of a relay process: :data:`TEST_SETTINGS` unless overridden."""
    settings = {**TEST_SETTINGS, **{k.lower(): v for k, v in overrides.items()}}
    return relay_env(
        database_url=database_url, broker_url=broker_url, exchange=exchange, **settings
    )


@dataclass
class Worker:
    """One ``relay dispatch --loop`` process and its log file."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")


class Fleet:
    """Starts and stops relay workers; every process is reaped by :meth:`stop`."""

    def __init__(
        self, env: dict[str, str], log_dir: Path, *, binary: str = RELAY_BIN, prefix: str = "w"
    ) -> None:
        """``binary``: the ``relay`` script to run (another release's, in an upgrade);
        ``prefix`` names the workers apart when two fleets share a database."""
        self.env = env
        self.log_dir = log_dir
        self.binary, self.prefix = binary, prefix
        self.workers: list[Worker] = []
        self._seq = 0

    def start(self, n: int = 1) -> list[Worker]:
        """Start ``n`` more workers."""
        started = []
        for _ in range(n):
            self._seq += 1
            name = f"{self.prefix}{self._seq}"
            path = self.log_dir / f"relay-{name}.log"
            log = path.open("wb")
            env = dict(self.env)
            url = sa.make_url(env["RELAY_DATABASE_URL"])
            if url.get_backend_name() == "postgresql":
                # Each worker's sessions are findable in pg_stat_activity by its name.
                url = url.update_query_dict({"application_name": f"relay-{name}"})
                env["RELAY_DATABASE_URL"] = url.render_as_string(hide_password=False)
            proc = subprocess.Popen(
                [self.binary, "dispatch", "--loop"], env=env, stdout=log, stderr=log
            )
            started.append(Worker(name, proc, path, log))
        self.workers.extend(started)
        return started

    @property
    def alive(self) -> list[Worker]:
        return [w for w in self.workers if w.alive()]

    def assert_alive(self) -> None:
        """Fail with the logs when a worker exited on its own."""
        dead = [w.name for w in self.workers if not w.alive() and w.proc.returncode != -9]
        assert not dead, f"workers {dead} exited:\n{self.logs()}"

    def by_pid(self, pid: int) -> Worker | None:
        return next((w for w in self.workers if w.pid == pid and w.alive()), None)

    def signal(self, worker: Worker, sig: signal.Signals) -> None:
        worker.proc.send_signal(sig)

    def kill(self, worker: Worker) -> None:
        """SIGKILL: no clean-up at all, as in a crash or an OOM kill."""
        worker.proc.kill()
        worker.proc.wait(timeout=10)

    def stop(self, timeout: float = 20.0) -> dict[str, int | None]:
        """SIGTERM every worker (resuming paused ones), wait, SIGKILL stragglers (after SIGUSR1:
        their stacks in their logs); exit codes, None for a straggler."""
        for w in self.workers:
            if w.alive():
                for sig in (signal.SIGCONT, signal.SIGTERM):
                    try:
                        w.proc.send_signal(sig)
                    except ProcessLookupError:
                        break
        deadline = time.monotonic() + timeout
        codes: dict[str, int | None] = {}
        for w in self.workers:
            try:
                codes[w.name] = w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                # Still running after SIGTERM: its threads' stacks into its log (the relay
                # prints them on SIGUSR1), for the failure's message, then SIGKILL.
                w.proc.send_signal(signal.SIGUSR1)
                time.sleep(1.0)
                w.proc.kill()
                w.proc.wait(timeout=10)
                codes[w.name] = None
            w._log.close()
        return codes

    def failures(self, codes: dict[str, int | None]) -> str:
        """``codes`` (from :meth:`stop`) and the logs of the workers whose code is not 0."""
        return f"{codes}\n{self.logs(name for name, code in codes.items() if code != 0)}"

    def logs(self, names: Iterable[str] | None = None) -> str:
        """The workers' logs (only those of ``names`` when given), each under its name."""
        chosen = self.workers if names is None else [w for w in self.workers if w.name in names]
        return "\n".join(f"--- {w.name} (pid {w.pid}) ---\n{w.log()}" for w in chosen)


def holders(engine: sa.Engine) -> collections.Counter[int]:
    """Rows in ``processing`` per pid of the worker holding them."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(outbox.c.locked_by, sa.func.count())
            .where(outbox.c.status == "processing")
            .group_by(outbox.c.locked_by)
        ).all()
    return collections.Counter({int(str(by).split(":")[1]): int(n) for by, n in rows if by})


def statuses(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        result = conn.execute(sa.select(outbox.c.status, sa.func.count()).group_by(outbox.c.status))
        return {str(s): int(n) for s, n in result}


def ids_with_status(engine: sa.Engine, status: str) -> set[int]:
    with engine.connect() as conn:
        return set(conn.execute(sa.select(outbox.c.id).where(outbox.c.status == status)).scalars())


def present_ids(engine: sa.Engine, ids: Iterable[int]) -> set[int]:
    """Which of ``ids`` still have a row."""
    with engine.connect() as conn:
        return set(conn.execute(sa.select(outbox.c.id).where(outbox.c.id.in_(list(ids)))).scalars())


def counted_sent(engine: sa.Engine) -> int:
    """Events counted in ``outbox_sent_counts`` (deleted at send)."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.coalesce(sa.func.sum(sent_counts.c.sent), 0))
            ).scalar_one()
        )


def enqueue_committed(
    engine: sa.Engine,
    n: int,
    *,
    event_type: str | Callable[[int], str] = "test.event",
    per_tx: int = 100,
    **kw: Any,
) -> list[int]:
    """Enqueue ``n`` events in committed transactions of ``per_tx``; returns their ids."""
    ids: list[int] = []
    for start in range(0, n, per_tx):
        with Session(engine) as session, session.begin():
            for i in range(start, min(n, start + per_tx)):
                kind = event_type(i) if callable(event_type) else event_type
                ids.append(relay.enqueue(session, kind, {"n": i}, **kw))
    return ids


@dataclass
class SteadyProducer:
    """Enqueues ``total`` events over about ``seconds`` from a thread, plus rolled-back decoys.

    Every fifth transaction is rolled back: its events must never be delivered.
    """

    engine: sa.Engine
    total: int
    seconds: float
    per_tx: int = 50
    event_type: str = "test.event"
    committed: list[int] = field(default_factory=list)
    rolled_back: int = 0
    error: BaseException | None = None
    _thread: threading.Thread | None = None

    def start(self) -> SteadyProducer:
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float = 120.0) -> list[int]:
        assert self._thread is not None
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "producer did not finish"
        if self.error is not None:
            raise self.error
        return self.committed

    @property
    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def _run(self) -> None:
        try:
            txs = -(-self.total // self.per_tx)
            pace = self.seconds / txs
            start = time.monotonic()
            made = tx = 0
            while made < self.total:
                if tx % 5 == 4:
                    with Session(self.engine) as session:
                        session.begin()
                        relay.enqueue(session, self.event_type, {"decoy": True})
                        session.rollback()
                    self.rolled_back += 1
                with Session(self.engine) as session, session.begin():
                    ids = [
                        relay.enqueue(session, self.event_type, {"n": made + i, "decoy": False})
                        for i in range(min(self.per_tx, self.total - made))
                    ]
                self.committed.extend(ids)
                made += len(ids)
                tx += 1
                # Pacing, not synchronisation: spread the load over the scenario's window.
                time.sleep(max(0.0, start + tx * pace - time.monotonic()))
        except BaseException as exc:
            self.error = exc


@dataclass(frozen=True)
class Audit:
    """What the final check found."""

    events: int
    received: int
    duplicates: int
    statuses: dict[str, int]


def audit_delivery(
    engine: sa.Engine,
    collector: Collector,
    committed: Iterable[int],
    *,
    duplicate_bound: int,
    failed: Iterable[int] = (),
    timeout: float = 60.0,
    deleted_at_send: bool = False,
) -> Audit:
    """Every committed event delivered (or among ``failed``), none lost, none ``processing``,
    nothing delivered that was not committed, every ``sent`` row confirmed (received), and
    duplicates within ``duplicate_bound``. ``deleted_at_send`` (``RELAY_DELETE_ON_SEND``): a
    sent event is one whose row is gone, and the sent counts hold each exactly once."""
    committed_ids, failed_ids = set(committed), set(failed)
    wanted = committed_ids - failed_ids
    deadline = time.monotonic() + timeout
    received = collector.drain(len(wanted), timeout=timeout, settle=0.5)
    # Duplicates count towards the drain's total: keep draining until every wanted id is in
    # (or the time is up), so a duplicate never hides an event still on its way.
    while (late := wanted - {m.outbox_id for m in received}) and time.monotonic() < deadline:
        left = max(0.1, deadline - time.monotonic())
        received = collector.drain(len(received) + len(late), timeout=left, settle=0.5)
    got = collections.Counter(m.outbox_id for m in received)
    status = statuses(engine)
    sent = ids_with_status(engine, "sent")
    if deleted_at_send:
        assert not sent, "rows marked sent although RELAY_DELETE_ON_SEND deletes them"
        sent = committed_ids - present_ids(engine, committed_ids)
        assert counted_sent(engine) == len(sent), "the sent counts differ from the rows deleted"
    assert status.get("processing", 0) == 0, f"rows left processing: {status}"
    assert status.get("pending", 0) == 0, f"rows left pending: {status}"
    assert ids_with_status(engine, "failed") == failed_ids, "unexpected failed rows"
    assert sent == wanted, f"{len(wanted - sent)} committed events not sent"
    missing = wanted - set(got)
    assert not missing, f"{len(missing)} sent events never reached the consumer (lost)"
    assert set(got) <= committed_ids, "a message that was never committed was delivered"
    assert all(m.body.get("decoy") is not True for m in received), "a rolled-back event leaked"
    duplicates = sum(n - 1 for n in got.values())
    assert duplicates <= duplicate_bound, f"{duplicates} duplicates > bound {duplicate_bound}"
    return Audit(len(committed_ids), len(received), duplicates, status)


def report(scenario: str, **numbers: object) -> None:
    """Print a scenario's numbers (shown with ``pytest -s`` or ``-rA``)."""
    text = ", ".join(
        f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in numbers.items()
    )
    print(f"[faults] {scenario}: {text}", flush=True)


def drained(engine: sa.Engine) -> bool:
    """No row is pending or processing any more."""
    s = statuses(engine)
    return s.get("pending", 0) == 0 and s.get("processing", 0) == 0
