"""Probes that tell the truth and SIGTERM within a bound (issue 38), with real processes on
PostgreSQL and RabbitMQ, faults through a TCP proxy:

- a child of ``RELAY_DATABASES`` made to hang (SIGSTOP) fails ``relay probe live`` within the
  bound written into the heartbeat file;
- the broker or the database cut off: the relay handles the outage, liveness stays fresh for
  longer than its bound, readiness names what is unavailable;
- SIGTERM while the database or the broker is frozen (no byte forwarded, no error): the relay
  exits within ``timing.STOP_SECONDS``, and a fresh relay then delivers every event.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from relay.config import timing
from relay.observe import heartbeat
from tests.support import databases
from tests.support.broker import Collector
from tests.support.env import wait_until
from tests.support.fleet import (
    IN_FLIGHT_BATCHES,
    RELAY_BIN,
    TEST_SETTINGS,
    Fleet,
    audit_delivery,
    enqueue_committed,
    fleet_env,
)
from tests.support.proxy import TcpProxy

pytestmark = [pytest.mark.serial, pytest.mark.timeout(180)]

#: The liveness bound of a relay at TEST_SETTINGS (2 leases + the confirm timeout).
BOUND = 2 * float(str(TEST_SETTINGS["lease_seconds"])) + float(
    str(TEST_SETTINGS["confirm_timeout_seconds"])
)
BATCH = int(str(TEST_SETTINGS["batch_size"]))


def _start(
    env: dict[str, str], log: Path, beat: Path | None = None, *, children: bool = False
) -> subprocess.Popen[bytes]:
    argv = [RELAY_BIN, "dispatch", "--loop"]
    if children:  # RELAY_DATABASES: the supervisor of a child process per database
        argv.append("--process-per-database")
    if beat is not None:
        argv += ["--heartbeat-file", str(beat)]
    with log.open("ab") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=out)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(10)


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux /proc)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def _live(beat: Path) -> bool:
    return heartbeat.live(str(beat))[0]


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RELAY_BIN, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_hung_child_fails_liveness_within_the_bound(
    backend_pool: databases.BackendPool, amqp_url: str, exchange_name: str, tmp_path: Path
) -> None:
    """RELAY_DATABASES, two children: SIGSTOP one and the shared heartbeat goes stale within
    the bound (the other child and the supervisor still run); SIGCONT and it is fresh again."""
    beat, log = tmp_path / "alive", tmp_path / "fleet.log"
    with (
        backend_pool.database("postgresql") as a,
        backend_pool.database("postgresql") as b,
    ):
        env = fleet_env(a, amqp_url, exchange_name) | {"RELAY_DATABASES": f"a={a},b={b}"}
        proc = _start(env, log, beat, children=True)
        try:
            wait_until(lambda: beat.exists() and _live(beat), 60, "the fleet's first heartbeat")
            assert heartbeat.written_bound(str(beat)) == BOUND
            wait_until(lambda: len(_children(proc.pid)) == 2, 30, "both children")
            hung = _children(proc.pid)[0]
            os.kill(hung, signal.SIGSTOP)
            try:
                stale = wait_until(lambda: not _live(beat), BOUND + 30, "a stale heartbeat")
                out = _cli(env, "probe", "live", "--heartbeat-file", str(beat))
                assert out.returncode == 1
                assert "stale heartbeat" in out.stderr
                assert proc.poll() is None
            finally:
                os.kill(hung, signal.SIGCONT)
            wait_until(lambda: _live(beat), 30, "a fresh heartbeat after SIGCONT")
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=timing.STOP_SECONDS + 20)
        finally:
            _reap(proc)
    assert code == 0, log.read_text(errors="replace")
    # Stale once the hung child's last beat is BOUND old: at most BOUND after the SIGSTOP.
    assert stale <= BOUND + 1.0, (stale, BOUND)
    print(f"[probes] hung child: liveness failed {stale:.1f}s after SIGSTOP (bound {BOUND:g}s)")


@pytest.mark.parametrize("target", ["broker", "database"])
def test_an_outage_the_relay_handles_keeps_it_live_and_not_ready(
    target: str,
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
    engine: sa.Engine,
    amqp_proxy: TcpProxy,
    pg_proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    """The broker (or the database) cut off for longer than the liveness bound: the relay
    waits it out (breaker open, reconnect backoff) and stays live all along, readiness says
    what is unavailable, and every event is delivered once it is back."""
    proxy = amqp_proxy if target == "broker" else pg_proxy
    db_url = pg_proxy.url_for(pg_url) if target == "database" else pg_url
    events_url = amqp_proxy.url_for(amqp_url) if target == "broker" else amqp_url
    env = fleet_env(db_url, events_url, exchange_name)
    beat, log = tmp_path / "alive", tmp_path / "relay.log"
    proc = _start(env, log, beat)
    try:
        wait_until(lambda: beat.exists() and _live(beat), 60, "the relay's first heartbeat")
        ids = enqueue_committed(engine, 50)
        assert len(collector.drain(50, timeout=30)) == 50
        proxy.cut()
        ids += enqueue_committed(engine, 50)
        # The outage lasts longer than the bound: the scenario, not a synchronisation.
        end, looks = time.monotonic() + BOUND + 3, 0
        while time.monotonic() < end:
            ok, why = heartbeat.live(str(beat))
            assert ok, f"liveness failed during a handled {target} outage: {why}"
            looks += 1
            time.sleep(0.5)
        ready = _cli(env, "probe", "ready")
        assert ready.returncode == 1, ready.stdout
        assert f"{target} unreachable" in ready.stderr
        assert proc.poll() is None
        proxy.restore()
        wait_until(lambda: _cli(env, "probe", "ready").returncode == 0, 30, "ready again")
        audit_delivery(engine, collector, ids, duplicate_bound=IN_FLIGHT_BATCHES * BATCH)
        assert _live(beat)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=timing.STOP_SECONDS + 20)
    finally:
        _reap(proc)
    assert code == 0, log.read_text(errors="replace")
    assert looks > 2 * BOUND


@pytest.mark.parametrize(
    ("frozen", "several"),
    [("database", False), ("broker", False), ("database", True)],
    ids=["database", "broker", "database-RELAY_DATABASES"],
)
def test_sigterm_is_obeyed_within_the_bound_while_a_server_is_frozen(
    frozen: str,
    several: bool,
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
    engine: sa.Engine,
    amqp_proxy: TcpProxy,
    pg_proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    """The database (or the broker) stops forwarding a byte, with rows waiting: SIGTERM ends the
    relay within STOP_SECONDS (after a warm stop when it could, forced when a call never
    returns), and a fresh relay delivers every event afterwards."""
    proxy = pg_proxy if frozen == "database" else amqp_proxy
    db_url = pg_proxy.url_for(pg_url) if frozen == "database" else pg_url
    events_url = amqp_proxy.url_for(amqp_url) if frozen == "broker" else amqp_url
    env = fleet_env(db_url, events_url, exchange_name)
    if several:
        env["RELAY_DATABASES"] = f"only={db_url}"
    log = tmp_path / "relay.log"
    proc = _start(env, log)
    try:
        ids = enqueue_committed(engine, 200)
        assert len(collector.drain(200, timeout=60)) == 200
        proxy.stall()
        ids += enqueue_committed(engine, 300)
        # Long enough for the relay to be inside a call to the frozen server (the scenario).
        time.sleep(1.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=timing.STOP_SECONDS + 30)
        took = time.monotonic() - sent
    finally:
        _reap(proc)
        proxy.restore()
    text = log.read_text(errors="replace")
    assert took <= timing.STOP_SECONDS, f"{took:.1f}s\n{text}"
    assert code in (0, 143), text
    fresh = Fleet(fleet_env(pg_url, amqp_url, exchange_name), tmp_path)
    try:
        fresh.start(1)
        result = audit_delivery(
            engine, collector, ids, duplicate_bound=IN_FLIGHT_BATCHES * BATCH, timeout=90
        )
    finally:
        codes = fresh.stop()
    assert set(codes.values()) == {0}, fresh.failures(codes)
    forced = "still stopping" in text
    print(
        f"[stop] {frozen} frozen{' (RELAY_DATABASES)' if several else ''}: exited {code} "
        f"{took:.1f}s after SIGTERM ({'forced' if forced else 'warm'}), "
        f"duplicates {result.duplicates}"
    )
