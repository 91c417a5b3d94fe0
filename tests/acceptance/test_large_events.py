"""A backlog of large events through a real `relay dispatch --loop`: the process's memory stays
bounded by ``RELAY_BATCH_MAX_BYTES``, not by the row count of its claims."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import kombu
import pytest
import sqlalchemy as sa

from tests.support.rows import count_by_status

RELAY = [sys.executable, "-m", "relay"]
MIB = 1_048_576
#: The bound of the run: small next to what the default row limits would hold (a claim of 100
#: to 1,000 events of 900 KB is 90-900 MB), large next to one event.
BATCH_MAX_BYTES = 4 * MIB
#: Peak RSS may pass the relay's idle RSS by this many bounds. A drain holds two batches at
#: once (one published while the next is leased), and a batch is in memory several times over
#: while it moves: the driver's text, the decoded payloads, the encoded bodies and frames.
PEAK_BOUNDS = 16
#: 300 events (270 MB) by default: the issue's 3,000 (2.7 GB) took 185 s on this 2-core shared
#: machine and 600 once took 208 s under load, and the bound does not depend on the count:
#: from the first claim on, the default row limits (100, doubling to 1,000) would lease 90 MB
#: or more (300 events without the bound peaked at 835 MiB). ``TEST_LARGE_EVENTS=3000`` runs
#: the issue's figure.
EVENTS = int(os.environ.get("TEST_LARGE_EVENTS", "300"))
#: Characters of each event's payload string: about 900 KB of JSON text.
EVENT_CHARS = 900_000


def _status_kib(pid: int, field: str) -> int:
    """``VmHWM`` (peak RSS) or ``VmRSS`` of process ``pid``, in KiB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


class _Counter:
    """Consumes the test's queue in a thread, keeping only each message's outbox id and body
    size (holding 2.7 GB of bodies would measure the test, not the relay)."""

    def __init__(self, url: str, exchange: str) -> None:
        self.ids: list[int] = []
        self.sizes: set[int] = set()
        self._stop = threading.Event()
        self._conn = kombu.Connection(url)
        channel = self._conn.channel()
        channel.basic_qos(0, 20, False)
        # Not durable: 2.7 GB of persistent messages would go to the shared broker's disk.
        self._queue = kombu.Queue(
            f"{exchange}.large",
            kombu.Exchange(exchange, type="topic", durable=True),
            routing_key="#",
            durable=False,
            auto_delete=True,
        )(channel)
        self._queue.declare()
        self._consumer = kombu.Consumer(channel, [self._queue], callbacks=[self._on_message])
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_message(self, body: object, message: kombu.Message) -> None:
        self.ids.append(int(message.headers["outbox_id"]))
        self.sizes.add(len(message.body))
        message.ack()

    def _run(self) -> None:
        with self._consumer:
            while not self._stop.is_set():
                try:
                    self._conn.drain_events(timeout=0.2)
                except TimeoutError:
                    continue

    @contextmanager
    def consuming(self) -> Iterator[_Counter]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(10)
            self._conn.release()


def _insert_backlog(engine: sa.Engine, n: int, chunk: int = 100) -> None:
    """``n`` events of ~900 KB written by plain SQL, as another team's service would (no
    producer cap on this path), ``chunk`` per transaction. The string repeats a 32-character
    block: PostgreSQL stores it compressed, the relay still reads it whole."""
    for start in range(0, n, chunk):
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO outbox (event_type, payload) "
                    "SELECT 'large.event', jsonb_build_object('s', "
                    "repeat(md5(i::text), CAST(:chars AS int) / 32), 'i', i) "
                    "FROM generate_series(CAST(:start AS int), CAST(:stop AS int)) AS i"
                ),
                {"chars": EVENT_CHARS, "start": start, "stop": min(start + chunk, n) - 1},
            )


@pytest.mark.serial
@pytest.mark.timeout(600)
def test_a_backlog_of_large_events_drains_with_rss_bounded_by_the_byte_bound(
    pg_url: str, engine: sa.Engine, amqp_url: str, exchange_name: str, tmp_path: Path
) -> None:
    """300 events of ~900 KB (270 MB; ``TEST_LARGE_EVENTS=3000``: 2.7 GB) written by plain SQL
    drain completely through one `relay dispatch --loop` at the default row limits with
    ``RELAY_BATCH_MAX_BYTES`` = 4 MiB, and the process's peak RSS (VmHWM) stays below its idle
    RSS + 16 x 4 MiB. Measured: idle 57-58 MiB, peak 93-95 MiB (3,000 events: 94 MiB); without
    the bound the same run peaked at 835 MiB (claims of 100 rows and more, each held several
    times over)."""
    heartbeat = tmp_path / "alive"
    env = dict(os.environ)
    env.update(
        RELAY_DATABASE_URL=pg_url,
        RELAY_BROKER_URL=amqp_url,
        RELAY_EXCHANGE=exchange_name,
        RELAY_BATCH_MAX_BYTES=str(BATCH_MAX_BYTES),
        RELAY_LEASE_SECONDS="60",
    )
    counter = _Counter(amqp_url, exchange_name)
    log = tmp_path / "relay.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [*RELAY, "dispatch", "--loop", "--heartbeat-file", str(heartbeat)],
            env=env,
            stderr=stderr,
        )
    started = time.monotonic()
    try:
        with counter.consuming():
            deadline = time.monotonic() + 60
            while not heartbeat.exists():  # the loop's first pass: imports done, connected
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the relay never started its loop"
                time.sleep(0.05)
            idle_kib = _status_kib(proc.pid, "VmRSS")
            _insert_backlog(engine, EVENTS)
            deadline = time.monotonic() + 480
            while len(counter.ids) < EVENTS or count_by_status(engine) != {"sent": EVENTS}:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, (
                    len(counter.ids),
                    count_by_status(engine),
                    log.read_text()[-2000:],
                )
                time.sleep(0.2)
            peak_kib = _status_kib(proc.pid, "VmHWM")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert len(set(counter.ids)) == EVENTS
    assert min(counter.sizes) > EVENT_CHARS
    bound_kib = idle_kib + PEAK_BOUNDS * BATCH_MAX_BYTES // 1024
    took = time.monotonic() - started
    print(f"{EVENTS} events in {took:.0f} s: idle RSS {idle_kib // 1024} MiB, ", end="")
    print(f"peak {peak_kib // 1024} MiB, bound {bound_kib // 1024} MiB")
    assert peak_kib < bound_kib, f"peak RSS {peak_kib} KiB over {bound_kib} KiB"
