"""examples/plugin_orders: the order service's own tests, which use the relay's pytest plugin
(commit, rollback, drain, assert), pass when pytest runs them as an application would."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "plugin_orders"

pytestmark = pytest.mark.timeout(120)


def test_the_example_applications_tests_pass_with_the_plugin(tmp_path: Path) -> None:
    # Installed, the relay's pytest11 entry point loads the plugin; from a checkout on
    # PYTHONPATH it is named with -p (both at once would register it twice).
    installed = any(ep.name == "relay" for ep in entry_points(group="pytest11"))
    plugin = [] if installed else ["-p", "relay.testing.pytest_plugin"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(EXAMPLE)])}
    env = {k: v for k, v in env.items() if not k.startswith("RELAY_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *plugin, str(EXAMPLE)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout, done.stdout[-2000:]


def test_without_the_plugin_its_fixtures_are_missing(tmp_path: Path) -> None:
    """The example depends on the plugin: -p no:relay (the documented opt-out) takes the
    fixtures away, so the run above proves the plugin, not some other harness."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(EXAMPLE)])}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:relay",
            "-q",
            str(EXAMPLE / "test_orders.py::test_a_refused_order_commits_no_event"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode != 0
    assert "fixture 'relay_engine' not found" in done.stdout, done.stdout[-2000:]


def test_the_pytest11_entry_point_of_pyproject_loads_the_plugin(tmp_path: Path) -> None:
    """pyproject.toml's ``pytest11`` entry point, as an installed distribution declares it (a
    dist-info written here, when the relay is not installed), makes pytest load the plugin
    with no ``-p``: the example's tests pass."""
    import tomllib

    if any(ep.name == "relay" for ep in entry_points(group="pytest11")):
        pytest.skip("installed: the first test already ran through the entry point")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    info = tmp_path / "site" / "relay_probe-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: relay-probe\nVersion: 0.0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in declared["pytest11"].items())
    (info / "entry_points.txt").write_text(f"[pytest11]\n{lines}")
    path = [str(tmp_path / "site"), str(ROOT), str(EXAMPLE)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env["PYTHONPATH"] = os.pathsep.join(path)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(EXAMPLE)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert declared["pytest11"] == {"relay": "relay.testing.pytest_plugin"}
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout
