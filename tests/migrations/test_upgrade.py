"""An upgrade as a running production fleet does it: the previous release's relays deliver
under a steady producer while a report holds the outbox open, the checkout's ``relay migrate``
runs, the checkout's relays join, the old ones stop; nothing is lost and no commit waits long.

The previous release is the newest of ``releases.toml``, installed from its recorded commit
into a virtualenv of its own (``tests/support/releases.py``, built once per machine).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa

from relay.store.engine import create_engine
from relay.store.schema import upgrade
from tests.support import databases, releases
from tests.support.broker import Collector
from tests.support.env import wait_until
from tests.support.fleet import Fleet, fleet_env, statuses

#: Sent rows already in the outbox: enough for the migration to have a table to work on, few
#: enough to keep the test short (bench/migrations.py measures the big outbox).
HISTORY = 10_000
#: The producer's pace: one single-row commit this often.
COMMIT_EVERY = 0.005
#: How long the report holds the outbox open once the migration waits on it (so it retries
#: a few times), and at most before that (the migration's start on a loaded machine).
REPORT_SECONDS = 2.0
REPORT_MOST_SECONDS = 20.0
#: The longest an application commit may wait during the migration (the issue's bound).
WORST_COMMIT = 1.0


@dataclass
class Producer:
    """The application: one ``INSERT INTO outbox`` committed every :data:`COMMIT_EVERY`, in
    plain SQL (any producer's contract), timing each commit."""

    engine: sa.Engine
    committed: list[int] = field(default_factory=list)
    #: (monotonic start, seconds the commit took) of each transaction.
    waits: list[tuple[float, float]] = field(default_factory=list)
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Producer:
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[int]:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(30)
        if self.error is not None:
            raise self.error
        return self.committed

    def worst(self, start: float, end: float) -> float:
        """The longest commit that was under way at any time in ``[start, end]``."""
        return max((took for at, took in self.waits if at <= end and at + took >= start), default=0)

    def _run(self) -> None:
        cast = "CAST(:p AS jsonb)" if self.engine.dialect.name == "postgresql" else ":p"
        insert = sa.text(
            f"INSERT INTO outbox (event_type, payload) VALUES ('upgrade.steady', {cast})"
            " RETURNING id"
        )
        try:
            n = 0
            while not self._stop.is_set():
                at = time.monotonic()
                with self.engine.begin() as conn:
                    row_id = conn.execute(insert, {"p": f'{{"n": {n}}}'}).scalar_one()
                self.waits.append((at, time.monotonic() - at))
                self.committed.append(int(row_id))
                n += 1
                # Pacing, not synchronisation.
                time.sleep(max(0.0, at + COMMIT_EVERY - time.monotonic()))
        except BaseException as exc:
            self.error = exc


@pytest.fixture(scope="module")
def previous_release() -> Path:
    """The previous release's virtualenv (built on first use, then cached)."""
    return releases.virtualenv(releases.previous())


@pytest.fixture(params=["postgresql", "mysql"])
def empty_url(request: pytest.FixtureRequest, backend_pool: databases.BackendPool) -> Iterator[str]:
    with backend_pool.database(request.param, migrated=False) as url:
        yield url


def _history(engine: sa.Engine) -> None:
    """:data:`HISTORY` rows sent long ago."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO outbox (event_type, payload, status, sent_at)"
                " VALUES ('upgrade.history', '{}', 'sent', CURRENT_TIMESTAMP)"
            ),
            [{}] * HISTORY,
        )


def _env_of_release(env: dict[str, str]) -> dict[str, str]:
    """A process of the installed release imports its own package, never the checkout."""
    return {k: v for k, v in env.items() if k != "PYTHONPATH"}


@dataclass
class Migration:
    """The checkout's ``relay migrate`` in its own process, its output read as it comes."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    waiting: threading.Event = field(default_factory=threading.Event)
    reader: threading.Thread | None = None

    @classmethod
    def start(cls, env: dict[str, str]) -> Migration:
        proc = subprocess.Popen(
            [sys.executable, "-m", "relay", "migrate"],
            env=env,
            cwd=releases.ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        migration = cls(proc)
        migration.reader = threading.Thread(target=migration._read, daemon=True)
        migration.reader.start()
        return migration

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("waiting for"):
                self.waiting.set()

    def wait(self) -> str:
        self.proc.wait(timeout=120)
        assert self.reader is not None
        assert self.proc.stdout is not None
        self.reader.join(10)
        self.proc.stdout.close()
        return "".join(self.lines)


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timeout(600)
def test_the_previous_release_upgrades_without_stopping(
    empty_url: str, previous_release: Path, amqp_url: str, exchange_name: str, tmp_path: Path
) -> None:
    """Two relays of the previous release deliver a steady producer's events; a report holds
    the outbox open; the checkout's `relay migrate` (every revision since that release) waits
    for its lock without holding the producer up (no commit waits a second), the checkout's
    relays join, the old ones exit 0 on SIGTERM; every committed event arrives once at least,
    no row is left unsent or dead-lettered, and no relay exits on its own."""
    release = releases.previous()
    old_relay = str(previous_release / "bin" / "relay")
    env = fleet_env(empty_url, amqp_url, exchange_name)
    made = subprocess.run(
        [old_relay, "migrate"],
        env=_env_of_release(env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    assert upgrade.current(empty_url) == release.schema
    engine = create_engine(empty_url)
    postgres = engine.dialect.name == "postgresql"
    collector = Collector(amqp_url, exchange_name)
    old = Fleet(_env_of_release(env), tmp_path, binary=old_relay, prefix="old")
    new = Fleet(env, tmp_path, prefix="new")
    producer = Producer(engine)
    try:
        _history(engine)
        old.start(2)
        producer.start()
        wait_until(lambda: statuses(engine).get("sent", 0) > HISTORY + 50, 30, "old relays")

        with engine.connect() as report:
            report.begin()
            report.execute(sa.text("SELECT count(*) FROM outbox")).scalar_one()
            started = time.monotonic()
            migrating = Migration.start(env)
            if migrating.waiting.wait(REPORT_MOST_SECONDS):
                time.sleep(REPORT_SECONDS)
            report.rollback()
        output = migrating.wait()
        ended = time.monotonic()
        assert migrating.proc.returncode == 0, output
        assert upgrade.current(empty_url) == upgrade.head()
        # The report held the lock the migration needed: it said so and waited without
        # queueing (MariaDB: for the report to end) or tried again (PostgreSQL).
        expected = "waiting for a lock on outbox" if postgres else "waiting for thread"
        assert expected in output, output
        worst = producer.worst(started, ended)

        new.start(2)
        wait_until(lambda: all("starting" in w.log() for w in new.workers), 30, "new relays")
        time.sleep(1.0)
        old.assert_alive()
        codes = old.stop()
        assert set(codes.values()) == {0}, old.failures(codes)
        time.sleep(1.0)
        committed = producer.stop()
        wait_until(
            lambda: not {"pending", "processing"} & set(statuses(engine)), 60, "the rest sent"
        )
        new.assert_alive()
        codes = new.stop()
        assert set(codes.values()) == {0}, new.failures(codes)

        received = {m.outbox_id for m in collector.drain(len(committed), timeout=60)}
        final = statuses(engine)
        print(
            f"[upgrade] {engine.dialect.name} {release.version} -> {upgrade.head()}:"
            f" migrate {ended - started:.1f} s, worst commit {worst * 1000:.0f} ms during it,"
            f" {len(committed)} events, {final}\n{output}",
            flush=True,
        )
        assert not set(committed) - received, "committed events never reached the broker"
        assert received <= set(committed), "a message that was never committed arrived"
        assert final == {"sent": HISTORY + len(committed)}, final
        assert worst < WORST_COMMIT, f"a commit waited {worst:.3f} s during the migration"
    finally:
        producer.stop() if producer._thread is not None and not producer._stop.is_set() else None
        old.stop()
        new.stop()
        collector.close()
        engine.dispose()


def test_a_relay_refuses_a_schema_older_than_it_needs(
    backend_pool: databases.BackendPool, tmp_path: Path
) -> None:
    """On the previous release's schema the checkout's relay does not start: it names
    `relay migrate` and exits non-zero before claiming anything."""
    with backend_pool.database("postgresql", migrated=False) as url:
        upgrade.upgrade(url, releases.previous().schema)
        env = {**fleet_env(url, "memory://", "upgrade"), "RELAY_EVENTS_URL": "memory://"}
        done = subprocess.run(
            [sys.executable, "-m", "relay", "dispatch", "--once"],
            env=env,
            cwd=releases.ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode != 0, done.stdout + done.stderr
    assert "relay migrate" in done.stderr, done.stderr
    assert f"revision {releases.previous().schema}" in done.stderr, done.stderr


def test_releases_are_recorded_with_their_commits_and_tags() -> None:
    """Each recorded release names the commit whose pyproject.toml carries its version, and
    the git tag v<version> points at that commit (when the checkout has its history)."""
    for release in releases.recorded():
        found = subprocess.run(
            ["git", "-C", str(releases.ROOT), "show", f"{release.commit}:pyproject.toml"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if found.returncode != 0 and os.environ.get("CI") is None:
            pytest.skip("a checkout without the release's history (shallow clone)")
        assert f'version = "{release.version}"' in found.stdout, release
        tag = subprocess.run(
            ["git", "-C", str(releases.ROOT), "rev-list", "-n1", f"v{release.version}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if tag.returncode == 0:
            assert tag.stdout.strip() == release.commit, release
