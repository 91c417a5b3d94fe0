"""Debian's Prometheus in tests: ``promtool`` on the shipped rule file, and a throw-away
``prometheus`` server scraping relay processes.

The server runs on a free loopback port with a config and a storage directory of its own in a
temporary directory (never Debian's service, never port 9090), scraping and evaluating every
second, and is always stopped. Missing binaries: the test skips locally and fails in CI
(``.ci/run`` installs the ``prometheus`` package).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support import services
from tests.support.scrape import free_port

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "tests.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "relay.json"
PROMTOOL = "/usr/bin/promtool"
PROMETHEUS = "/usr/bin/prometheus"


def require(binary: str) -> str:
    """``binary``'s path, or skip the test (fail it under CI) when it is not installed."""
    if not os.access(binary, os.X_OK):
        message = f"{binary} is not installed (apt-get install prometheus)"
        if services.IN_CI:
            pytest.fail(f"{message}; CI requires it", pytrace=False)
        pytest.skip(message)
    return binary


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """``promtool args...``, run from the rule file's directory (tests.yml names it relatively)."""
    return subprocess.run(
        [require(PROMTOOL), *args],
        cwd=RULES.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )


#: A ``relay_…`` metric name in PromQL; a recording rule's ``relay:…`` names are not series.
_SERIES = re.compile(r"\b(relay_[a-z0-9_]+)")


def series_in(text: str) -> set[str]:
    """The ``relay_…`` metric names an expression (or a file of them) queries; a histogram's
    ``_bucket``, ``_count`` and ``_sum`` series by the histogram's name, as documented."""
    return {re.sub(r"_(bucket|count|sum)$", "", n) for n in _SERIES.findall(text)}


def shortened(rules: str, seconds: int) -> str:
    """The rule file with every ``for:`` shortened to ``seconds`` (the test's clock, never the
    shipped one): a real Prometheus then fires within seconds what waits minutes in production."""
    return re.sub(r"(?m)^(\s+)for: \S+$", rf"\g<1>for: {seconds}s", rules)


class Prometheus:
    """A running server: its HTTP API on ``port``."""

    def __init__(self, port: int, work: Path, proc: subprocess.Popen[bytes]) -> None:
        self.port, self.work, self.proc = port, work, proc

    def scrape(self, targets: list[str]) -> None:
        """Scrape ``targets`` (``host:port``) from now on, as job ``relay`` (file discovery:
        Prometheus watches the file, no reload; its discovery passes changes on at most every
        5 s, so wait for :meth:`targets_up`)."""
        _write_targets(self.work, targets)

    def get(self, path: str) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}"
        with urllib.request.urlopen(url, timeout=5) as reply:
            return json.loads(reply.read())["data"]

    def firing(self) -> dict[str, list[dict[str, str]]]:
        """The alerts firing now, by name: the labels of each."""
        found: dict[str, list[dict[str, str]]] = {}
        for alert in self.get("/api/v1/alerts")["alerts"]:
            if alert["state"] == "firing":
                found.setdefault(alert["labels"]["alertname"], []).append(alert["labels"])
        return found

    def targets_up(self) -> int:
        """How many scrape targets the last scrape found up."""
        return sum(t["health"] == "up" for t in self.get("/api/v1/targets")["activeTargets"])

    @property
    def log(self) -> str:
        path = self.work / "prometheus.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


def _write_targets(work: Path, targets: list[str]) -> None:
    staged = work / "targets.tmp"
    staged.write_text(json.dumps([{"targets": targets}]))
    staged.replace(work / "targets.json")  # whole, never half-written


@contextmanager
def running(targets: list[str], rules: str, *, interval: str = "1s") -> Iterator[Prometheus]:
    """A Prometheus scraping ``targets`` (``host:port``) as job ``relay`` every ``interval``,
    evaluating ``rules`` (a rule file's text) as often; stopped whatever happened."""
    binary = require(PROMETHEUS)
    work = Path(tempfile.mkdtemp(prefix="relay-prometheus-"))
    (work / "alerts.yml").write_text(rules)
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(work / "alerts.yml")],
        "scrape_configs": [
            {
                "job_name": "relay",
                "file_sd_configs": [
                    {"files": [str(work / "targets.json")], "refresh_interval": interval}
                ],
            },
        ],
    }
    (work / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    _write_targets(work, targets)
    with open(work / "prometheus.log", "wb") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={work / 'prometheus.yml'}",
                f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Prometheus(port, work, proc)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                server.get("/api/v1/status/buildinfo")
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"prometheus did not start:\n{server.log}") from None
                time.sleep(0.2)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(work, ignore_errors=True)
