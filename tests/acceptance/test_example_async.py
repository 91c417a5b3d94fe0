"""examples/async_orders.py works as its docstring says, in an empty directory on the embedded
defaults: ``relay migrate``, the app under uvicorn, a POST, ``relay dispatch --once``."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.env import wait_until

ROOT = Path(__file__).resolve().parents[2]
UVICORN = str(Path(sys.executable).with_name("uvicorn"))

pytestmark = pytest.mark.timeout(180)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(port: int, body: object) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/orders", data=json.dumps(body).encode(), method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (http://127.0.0.1 only)
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_the_async_orders_example(tmp_path: Path) -> None:
    """A placed order and its keyed event commit together and the relay publishes the event to
    the bound queue; a refused event (a key over 255 bytes) leaves neither order nor event."""
    shutil.copy(ROOT / "examples" / "async_orders.py", tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "ORDERS_"))}
    env["PYTHONUNBUFFERED"] = "1"

    def run(*cmd: str) -> str:
        done = subprocess.run(
            cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    run(sys.executable, "-m", "relay", "migrate")
    run(sys.executable, "async_orders.py", "bind")
    port = _free_port()
    with (tmp_path / "uvicorn.log").open("wb") as log:
        server = subprocess.Popen(
            [UVICORN, "--app-dir", str(tmp_path), "async_orders:app", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(lambda: _listening(port) or server.poll() is not None, 60, "uvicorn")
            assert server.poll() is None, (tmp_path / "uvicorn.log").read_text()
            status, placed = _post(port, {"customer": "c-1", "total": "9.90"})
            assert status == 201, placed
            status, refused = _post(port, {"customer": "x" * 300, "total": "1"})
            assert status == 400, refused
            assert "ordering_key" in str(refused["error"]), refused
        finally:
            server.terminate()
            server.wait(timeout=30)
    run(sys.executable, "-m", "relay", "dispatch", "--once")
    read = run(sys.executable, "async_orders.py", "read").splitlines()
    assert read == [
        f"customer-c-1 1 {{'order_id': {placed['order_id']}, 'customer': 'c-1', 'total': '9.90'}}"
    ]
    with sqlite3.connect(tmp_path / "relay.sqlite3") as db:
        events = db.execute("SELECT event_type, ordering_key, seq, status FROM outbox").fetchall()
        orders = db.execute("SELECT id, customer FROM shop_orders").fetchall()
    assert events == [("order.placed", "customer-c-1", 1, "sent")]
    assert orders == [(placed["order_id"], "c-1")]
