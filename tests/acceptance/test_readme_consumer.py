"""The consumer of the embedded transport in docs/consuming.md works in a fresh directory,
started before the relay ever ran there, on the defaults (SQLite and ``filesystem://``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- embedded-consumer:"

pytestmark = pytest.mark.timeout(180)


def readme_consumer() -> str:
    """The Python block that follows the marker in docs/consuming.md."""
    text = (ROOT / "docs" / "consuming.md").read_text()
    after = text[text.index(MARKER) :]
    match = re.search(r"```python\n(.*?)```", after, re.S)
    assert match, "docs/consuming.md lost its embedded consumer block"
    return match.group(1)


def _relay(cwd: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    done = subprocess.run(
        [sys.executable, "-m", "relay", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_the_readme_consumer_receives_events_in_a_fresh_directory(tmp_path: Path) -> None:
    """Consumer first (no relay-broker folder yet), then `relay migrate`, three events written
    by a transaction, `relay dispatch --once`: the consumer prints all three."""
    (tmp_path / "consumer.py").write_text(readme_consumer())
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    consumer = subprocess.Popen(
        [sys.executable, "consumer.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        control = tmp_path / "relay-broker" / "control"
        while not (control.is_dir() and any(control.iterdir())):  # its binding is declared
            assert consumer.poll() is None, consumer.communicate()[1]
            assert time.monotonic() < deadline, "the consumer never declared its binding"
            time.sleep(0.05)
        _relay(tmp_path, "migrate")
        write = (
            "import relay, sqlalchemy as sa\n"
            "from relay.store.engine import create_engine\n"
            "engine = create_engine('sqlite:///relay.sqlite3')\n"
            "with engine.begin() as conn:\n"
            "    for n in range(3):\n"
            "        relay.enqueue(conn, 'order.created', {'n': n})\n"
        )
        subprocess.run([sys.executable, "-c", write], cwd=tmp_path, env=env, check=True)
        _relay(tmp_path, "dispatch", "--once")
        lines: list[str] = []
        assert consumer.stdout is not None
        while len(lines) < 3:
            line = consumer.stdout.readline()
            assert line, (
                f"consumer ended early: {consumer.stderr.read() if consumer.stderr else ''}"
            )
            lines.append(line.strip())
    finally:
        consumer.kill()
        _, err = consumer.communicate()
        print(err[-3000:])
    # Events without an ordering key carry no order promise: compare as a set.
    assert sorted(line.split(" ", 2)[1:] for line in lines) == [
        ["order.created", f"{{'n': {n}}}"] for n in range(3)
    ]
