"""``kill -USR1`` on ``relay dispatch --loop``: every thread's stack on stderr, and the relay
goes on delivering; under ``RELAY_DATABASES`` the supervisor dumps its own and passes the
signal on to each database's relay. Real processes, PostgreSQL and RabbitMQ."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from tests.support import databases
from tests.support.broker import Collector
from tests.support.env import wait_until
from tests.support.fleet import RELAY_BIN, TEST_SETTINGS

pytestmark = pytest.mark.timeout(120)

#: faulthandler's header of one thread's stack; "Current thread" marks the one it ran in.
THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$", re.M)


def _env(amqp_url: str, exchange: str, **relay: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update({f"RELAY_{k.upper()}": str(v) for k, v in TEST_SETTINGS.items()})
    env.update(RELAY_BROKER_URL=amqp_url, RELAY_EXCHANGE=exchange)
    env.update({f"RELAY_{k}": v for k, v in relay.items()})
    return env


def _enqueue(url: str, n: int) -> None:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with Session(engine) as session, session.begin():
            relay.enqueue(session, "stack.dump", {"n": n})
    finally:
        engine.dispose()


#: The purge loop's own frame in a dump.
PURGER = re.compile(r'File ".*relay/retention/purger\.py", line \d+ in _run')


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` if it is still running."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    finally:
        _reap(proc)


def test_sigusr1_prints_every_threads_stack_and_the_relay_goes_on(
    pg_url: str, amqp_url: str, exchange_name: str, collector: Collector, tmp_path: Path
) -> None:
    log, beat = tmp_path / "relay.log", tmp_path / "alive"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [RELAY_BIN, "dispatch", "--loop", "--heartbeat-file", str(beat)],
            env=_env(amqp_url, exchange_name, DATABASE_URL=pg_url),
            stdout=out,
            stderr=out,
        )
        try:
            # The first pass of the loop: the handler is in place (it is set just before).
            wait_until(beat.exists, 30, "the relay's first pass")
            proc.send_signal(signal.SIGUSR1)
            # Any thread's header: faulthandler marks "Current thread" only when the thread the
            # kernel handed the signal to is the one it finds itself in, which is not always.
            try:
                wait_until(lambda: THREAD.search(log.read_text(errors="replace")), 10, "a dump")
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{log.read_text(errors='replace')[-3000:]}") from None
            assert proc.poll() is None, "SIGUSR1 stopped the relay"

            # The purge loop's first run starts with the relay: a dump taken while it is still
            # connecting may catch its thread deep in the driver (faulthandler then shows only
            # the top frames). Ask again, a second apart, until a dump shows its loop.
            def purger_dumped() -> bool:
                if PURGER.search(log.read_text(errors="replace")):
                    return True
                proc.send_signal(signal.SIGUSR1)
                return False

            wait_until(purger_dumped, 15, "a dump showing the purger's loop", interval=1.0)
            _enqueue(pg_url, 1)
            [message] = collector.drain(1, timeout=30)
            assert message.body["n"] == 1
            code = _stop(proc)
        finally:
            _reap(proc)
    text = log.read_text(errors="replace")
    assert code == 0, text
    threads = THREAD.findall(text)
    # The main thread in the drain loop, and the relay's own threads beside it (the watcher
    # of the id sequence, the purger): each one's stack, not only the signalled thread's.
    assert len(threads) >= 3, text
    assert re.search(r'File ".*relay/dispatch/dispatcher\.py", line \d+ in loop', text), text
    assert PURGER.search(text), text


def test_the_supervisor_passes_sigusr1_on_to_each_databases_relay(
    backend_pool: databases.BackendPool, amqp_url: str, exchange_name: str, tmp_path: Path
) -> None:
    log = tmp_path / "fleet.log"
    with (
        backend_pool.database("postgresql") as a,
        backend_pool.database("postgresql") as b,
        log.open("wb") as out,
    ):
        env = _env(amqp_url, exchange_name, DATABASES=f"a={a},b={b}")
        argv = [RELAY_BIN, "dispatch", "--loop", "--process-per-database"]
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=out)
        try:
            # Each database's relay sets its dump first thing, then logs "relay <id> starting:"
            # (the supervisor's own line reads "relay fleet starting over").
            def started() -> int:
                return len(re.findall(r"relay \S+ starting: ", log.read_text(errors="replace")))

            wait_until(lambda: started() >= 2, 30, "both databases' relays to start")
            proc.send_signal(signal.SIGUSR1)
            try:
                wait_until(
                    lambda: len(_dumps(log.read_text(errors="replace"))) >= 3,
                    10,
                    "the supervisor's and both relays' stacks",
                )
            except AssertionError as e:
                raise AssertionError(f"{e}\n{log.read_text(errors='replace')}") from None
            assert proc.poll() is None, "SIGUSR1 stopped the supervisor"
            code = _stop(proc)
        finally:
            _reap(proc)
    text = log.read_text(errors="replace")
    assert code == 0, text
    # One dump each: the supervisor's (its main thread in _supervise) and each relay's (its
    # main thread under runner.run), and no relay ended by the signal.
    assert sorted(_dumps(text)) == ["relay", "relay", "supervisor"], text
    assert "exited" not in text, text


def _dumps(text: str) -> list[str]:
    """Whose main-thread stacks ``text`` holds: each relay's bottom frame is runner.run, the
    supervisor's _supervise. Counted by frame, not by the "Current thread" header: that one
    names the thread the signal reached, and the kernel may hand it to a thread that is being
    created or is ending, which faulthandler then prints as a plain "Thread". The three
    processes write to one file at once, so lines are matched anywhere in it."""
    found = ["relay"] * len(re.findall(r'relay/runners/loop\.py", line \d+ in run\b', text))
    found += ["supervisor"] * len(re.findall(r'\.py", line \d+ in _supervise\b', text))
    return found
