"""`relay demo` as a user runs it: a real process, real Celery execution, its exit status."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

RELAY = [sys.executable, "-c", "from relay.commands import main; raise SystemExit(main())"]


def _demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    return subprocess.run(
        [*RELAY, "demo", "--seed", "7", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_demo_on_the_embedded_default_delivers_every_committed_event_once(tmp_path: Path) -> None:
    """On a bare machine (no RELAY_* set, no server) the demo relays exactly the committed
    events through a real Celery worker and exits 0, leaving nothing in the working directory."""
    done = _demo(tmp_path, "--events", "600")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK: every committed event delivered exactly once" in done.stdout
    assert "committed 600, delivered 600, duplicates 0, lost 0" in done.stdout
    assert re.search(r"rolled back with [1-9]\d* events", done.stdout), "no rollback simulated"
    assert "delivered" in done.stderr, "no progress shown"
    assert list(tmp_path.iterdir()) == []


def test_demo_runs_on_each_database(tmp_path: Path, db_url: str) -> None:
    """`--database-url` runs the same checked path on PostgreSQL, MariaDB and SQLite."""
    done = _demo(tmp_path, "--events", "300", "--database-url", db_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "committed 300, delivered 300, duplicates 0, lost 0" in done.stdout


def test_demo_exits_non_zero_when_events_are_not_delivered(tmp_path: Path) -> None:
    """Given no time to relay, events count as lost and the exit status says so."""
    done = _demo(tmp_path, "--events", "200", "--timeout", "0")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED" in done.stdout


@pytest.mark.parametrize("bad", [["--events", "0"], ["--rollback-ratio", "1.5"]])
def test_demo_refuses_bad_options(tmp_path: Path, bad: list[str]) -> None:
    """Nonsense options are refused with exit status 2 before anything runs."""
    done = _demo(tmp_path, *bad)
    assert done.returncode == 2
    assert "relay demo" in done.stderr
