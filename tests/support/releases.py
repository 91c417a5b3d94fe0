"""The recorded releases (``releases.toml``) and a virtualenv of any of them, built once.

A release's virtualenv is built from its recorded commit (``git archive`` of the commit, then
``pip install`` of that tree with the MySQL extra) under a path keyed by the commit, so a
machine pays for it once: ``$RELAY_RELEASES_CACHE`` or ``~/.cache/celery-outbox-relay/
releases/<commit>``. Concurrent test processes wait for one another's build (a file lock).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ROOT / "releases.toml"


@dataclass(frozen=True)
class Release:
    """One line of ``releases.toml``."""

    version: str
    commit: str
    date: str
    #: The schema revision its migration chain ends at.
    schema: str


def recorded() -> list[Release]:
    """Every recorded release, oldest first."""
    with RELEASES.open("rb") as f:
        return [Release(**r) for r in tomllib.load(f)["release"]]


def previous() -> Release:
    """The newest recorded release: the one this checkout upgrades from."""
    return recorded()[-1]


def cache_root() -> Path:
    found = os.environ.get("RELAY_RELEASES_CACHE")
    if found:
        return Path(found)
    return Path.home() / ".cache" / "celery-outbox-relay" / "releases"


def _run(cmd: list[str], stdin: bytes | None = None) -> bytes:
    done = subprocess.run(cmd, input=stdin, capture_output=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout!r}\n{done.stderr!r}")
    return done.stdout


def virtualenv(release: Release) -> Path:
    """The virtualenv of ``release`` (its ``bin/relay`` runs that release), built if missing."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    venv = root / release.commit
    built = venv / ".built"
    with (root / f"{release.commit}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if built.exists():
            return venv
        # A build cut short leaves a virtualenv without the mark: start it again. It is built
        # where it stays, since a virtualenv's scripts name their own path.
        shutil.rmtree(venv, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=root) as source:
            archive = _run(["git", "-C", str(ROOT), "archive", release.commit])
            _run(["tar", "-x", "-C", source], stdin=archive)
            _run([sys.executable, "-m", "venv", str(venv)])
            _run([str(venv / "bin" / "pip"), "install", "-q", f"{source}[mysql]"])
        built.write_text(release.version)
        return venv
