"""SIGTERM's deadline (relay.dispatch.stopping), a loop's rest that still beats, and the liveness
bound written into the heartbeat file: each in a process or on a file of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from relay.config import timing
from relay.dispatch import dispatcher
from relay.dispatch.stopping import FORCED_EXIT_STATUS
from relay.observe import heartbeat
from relay.runners import supervisor

_BLOCKED = """
import threading
from relay.dispatch.stopping import StopGuard
guard = StopGuard(seconds={seconds})
{signals}
threading.Event().wait()  # stands for a call that never returns
"""


def _blocked(seconds: float, signals: int) -> subprocess.CompletedProcess[str]:
    code = _BLOCKED.format(seconds=seconds, signals="guard.signalled()\n" * signals)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.timeout(90)
def test_a_process_blocked_for_good_exits_at_its_deadline_naming_what_it_waited_on() -> None:
    """One stop signal, then a wait that never ends: the process exits on the deadline, with
    the forced status, a line saying so and its threads' stacks."""
    done = _blocked(0.5, signals=1)
    assert done.returncode == FORCED_EXIT_STATUS
    assert "exiting on its deadline" in done.stderr
    assert "File " in done.stderr
    assert "wait" in done.stderr


@pytest.mark.timeout(90)
def test_a_second_stop_signal_exits_at_once() -> None:
    """A second signal does not wait for the deadline (here an hour away)."""
    done = _blocked(3600.0, signals=2)
    assert done.returncode == FORCED_EXIT_STATUS
    assert "exiting on a second stop signal" in done.stderr


@pytest.mark.timeout(90)
def test_a_disarmed_guard_never_fires() -> None:
    """A process that stopped in time is not cut short by the timer it armed."""
    code = textwrap.dedent("""
        import time
        from relay.dispatch.stopping import StopGuard
        guard = StopGuard(seconds=0.2)
        guard.signalled()
        guard.disarm()
        time.sleep(1.0)  # five times the deadline: the scenario, not a synchronisation
        print("finished")
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "finished"), done.stderr


def test_a_long_rest_beats_and_ends_when_its_event_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rest of the loop (idle, or waiting out an outage) calls the heartbeat while it waits,
    and returns as soon as its event is set."""
    monkeypatch.setattr(timing, "HEARTBEAT_REST_SECONDS", 0.001)
    event, beats = threading.Event(), []

    def beat() -> None:
        beats.append(1)
        if len(beats) == 5:
            event.set()

    dispatcher._rest(event, 3600.0, beat)
    assert len(beats) == 5


def test_the_liveness_bound_follows_the_lease_and_the_confirm_timeout() -> None:
    """Two leases plus one confirm wait: 70 s at the defaults."""
    assert timing.liveness_seconds(30.0, 10.0) == 70.0
    assert timing.liveness_seconds(3, 2) == 8.0


def test_the_probe_reads_the_bound_the_relay_wrote(tmp_path: Path) -> None:
    """A heartbeat file carries its bound; the probe holds a beat to it, or to the old default
    when the file is empty (written by an older relay)."""
    path = str(tmp_path / "alive")
    beat = heartbeat.beats(path, 8.0)
    assert beat is not None
    beat()
    assert heartbeat.written_bound(path) == 8.0
    old = os.stat(path).st_mtime - 9
    os.utime(path, (old, old))
    ok, why = heartbeat.live(path)
    assert not ok
    assert "> 8s" in why
    Path(path).write_text("")
    assert heartbeat.written_bound(path) == heartbeat.DEFAULT_MAX_AGE_SECONDS


def test_the_supervisor_file_carries_the_oldest_childs_beat(tmp_path: Path) -> None:
    """Under RELAY_DATABASES the shared file takes the time of the child that beat last longest
    ago: one stale child makes it stale."""
    shared = str(tmp_path / "alive")
    children = [
        supervisor.Child(f"db{i}", {}, False, heartbeat_file=f"{shared}.{i}") for i in (0, 1)
    ]
    for c in children:
        assert c.heartbeat_file is not None
        heartbeat.touch(c.heartbeat_file)
    stale = os.stat(f"{shared}.1").st_mtime - 100
    os.utime(f"{shared}.1", (stale, stale))
    beat = heartbeat.oldest(shared, 8.0, lambda: [c.last_beat() for c in children])
    assert beat is not None
    beat()
    assert os.stat(shared).st_mtime == stale
    assert not heartbeat.live(shared)[0]
    heartbeat.touch(f"{shared}.1")
    beat()
    assert heartbeat.live(shared)[0]
