"""RELAY_METRICS_PORT on a port already taken: `relay dispatch --loop` refuses to start."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from relay import commands as cli


def test_a_taken_metrics_port_stops_dispatch_with_the_variable_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the port in use, `relay dispatch --loop` exits 2 naming RELAY_METRICS_PORT instead
    of relaying without the metrics it was asked for."""
    for name in list(os.environ):
        if name.startswith("RELAY_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["migrate"]) == 0
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # noqa: S104  # the endpoint binds every interface too
        taken.listen()
        monkeypatch.setenv("RELAY_METRICS_PORT", str(taken.getsockname()[1]))
        assert cli.main(["dispatch", "--loop"]) == 2
    assert "RELAY_METRICS_PORT=" in capsys.readouterr().err
