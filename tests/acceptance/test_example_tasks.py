"""examples/transactional_tasks.py works as its docstring says, in an empty directory on the
embedded defaults: the committed order's task runs, the rolled-back one's never does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.env import wait_until

ROOT = Path(__file__).resolve().parents[2]
CELERY = str(Path(sys.executable).with_name("celery"))

pytestmark = pytest.mark.timeout(180)


def test_the_transactional_tasks_example(tmp_path: Path) -> None:
    shutil.copy(ROOT / "examples" / "transactional_tasks.py", tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env |= {"PYTHONPATH": str(tmp_path), "PYTHONUNBUFFERED": "1"}

    def run(*cmd: str) -> str:
        done = subprocess.run(
            cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "order 1 committed" in run(sys.executable, "transactional_tasks.py")
    run(sys.executable, "-m", "relay", "dispatch", "--once")
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [
                CELERY,
                "-A",
                "transactional_tasks",
                "worker",
                "-P",
                "solo",
                "-Q",
                "shop",
                "-l",
                "INFO",
            ],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(lambda: b"charged order 1: 42" in log.read_bytes(), 60, "the task to run")
        finally:
            worker.terminate()
            worker.wait(30)
    assert b"charged order 2" not in log.read_bytes()
