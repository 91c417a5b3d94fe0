"""Every command starts with any one RELAY_* variable set alone to an edge of its range.

Setting one variable used to make other defaults contradict it (a 10 s lease against the 10 s
confirm timeout stopped every command); the defaults now follow what was set.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relay import commands as cli
from relay.celery import celery_config, create_app
from relay.config import Settings
from tests.unit.test_config import EDGE_VALUES

#: The commands that need only the database (bad values of other settings cannot stop them).
DATABASE_COMMANDS = [
    ["migrate"],
    ["status"],
    ["status", "--json"],
    ["failed", "list"],
    ["purge-sent", "--older-than", "7d"],
    ["pending", "list"],
    ["inbox", "purge", "--older-than", "30d"],
]
#: Every command a user runs first, with the arguments it needs.
COMMANDS = [*DATABASE_COMMANDS, ["probe", "ready"], ["doctor"], ["dispatch", "--once"]]


@pytest.fixture
def fresh_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with no RELAY_* variable set: the embedded defaults."""
    for name in list(os.environ):
        if name.startswith("RELAY_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("var", "value"), EDGE_VALUES)
def test_every_command_starts_with_one_variable_at_an_edge(
    var: str, value: str, fresh_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """migrate, status, failed list, purge-sent and dispatch --once all exit 0, and the Celery
    app builds its configuration, with ``var=value`` and the defaults for the rest."""
    monkeypatch.setenv(var, value)
    for args in COMMANDS:
        assert cli.main(args) == 0, args
    settings = Settings.from_env()
    app = create_app(settings)
    assert app.conf.task_default_queue == settings.queue
    assert celery_config(settings)["broker_url"] == settings.broker_url


@pytest.mark.parametrize(
    "var",
    ["RELAY_BATCH_SIZE", "RELAY_LEASE_SECONDS", "RELAY_MAX_ATTEMPTS", "RELAY_TICK_SECONDS"],
)
def test_database_commands_ignore_bad_values_they_do_not_use(
    var: str, fresh_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad value of a relay-only setting stops `relay dispatch` (exit 2, naming it) but not
    `relay migrate`, `status`, `failed`, `pending`, `purge-sent` or `inbox purge`, which
    need only the database."""
    monkeypatch.setenv(var, "not-a-number")
    for args in DATABASE_COMMANDS:
        assert cli.main(args) == 0, args
    assert cli.main(["dispatch", "--once"]) == 2
    assert var in capsys.readouterr().err


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("RELAY_LEASE_SECONDS", "1"),
        ("RELAY_LEASE_SECONDS", "5"),
        ("RELAY_LEASE_SECONDS", "3600"),
        ("RELAY_CONFIRM_TIMEOUT_SECONDS", "600"),
        ("RELAY_BATCH_SIZE", "10000"),
        ("RELAY_EXCHANGE", "relay"),
    ],
)
def test_a_celery_worker_with_beat_starts(var: str, value: str, tmp_path: Path) -> None:
    """`celery -A relay worker -B` reaches "ready" with ``var=value`` alone."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")} | {var: value}
    assert (
        subprocess.run(
            [sys.executable, "-m", "relay", "migrate"], cwd=tmp_path, env=env, timeout=60
        ).returncode
        == 0
    )
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "relay",
                "worker",
                "-B",
                "-P",
                "solo",
                "-l",
                "INFO",
            ],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 90
            while b"ready." not in log.read_bytes():
                assert worker.poll() is None, log.read_text(errors="replace")[-3000:]
                assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
                time.sleep(0.1)
        finally:
            worker.terminate()
            worker.wait(timeout=60)


def test_a_reader_that_goes_away_ends_a_command_quietly(fresh_dir: Path) -> None:
    """`relay status | head -0`: the pipe's reader is gone before the command writes; it stops
    with 141 (as a shell reports SIGPIPE) and no traceback."""
    assert cli.main(["migrate"]) == 0  # the embedded default database, in this test's folder
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "relay", "status"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
