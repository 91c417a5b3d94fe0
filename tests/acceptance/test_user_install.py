"""The project as a new user installs it: the built wheel in a fresh virtualenv, without the
``dev`` or ``bench`` extras, run with the commands the README gives.

The suite's own virtualenv has every extra, so it would hide a dependency that only a test
brings in (as ``packaging`` for Kombu's Redis transport once was).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from relay.store.engine import create_engine
from tests.support import databases, services
from tests.support.broker import Collector
from tests.support.rows import enqueue_many

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


class UserVenv:
    """A virtualenv holding only the wheel and its runtime dependencies."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.bin = folder / "venv" / "bin"
        self.cwd = folder / "work"  # away from the checkout, whose relay/ would shadow the wheel
        self.cwd.mkdir()
        self.wheel: Path | None = None

    def install(self, extras: str = "") -> None:
        if self.wheel is None:
            _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", self.folder, ROOT])
            (self.wheel,) = self.folder.glob("celery_outbox_relay-*.whl")
            _run([sys.executable, "-m", "venv", self.folder / "venv"])
        _run([self.bin / "pip", "install", "-q", f"{self.wheel}{extras}"], timeout=540)

    def env(self, **relay: str) -> dict[str, str]:
        base = {"PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(self.folder), "LANG": "C.UTF-8"}
        return base | {f"RELAY_{k.upper()}": v for k, v in relay.items()}

    def relay(self, *args: str, **relay: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.bin / "relay", *args],
            cwd=self.cwd,
            env=self.env(**relay),
            capture_output=True,
            text=True,
            timeout=120,
        )

    @contextmanager
    def process(self, name: str, *args: str, **relay: str) -> Iterator[subprocess.Popen[bytes]]:
        log = (self.folder / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            [self.bin / "celery", *args],
            cwd=self.cwd,
            env=self.env(**relay),
            stdout=log,
            stderr=log,
        )
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")[-3000:]


def _run(cmd: list[object], timeout: float = 240) -> None:
    done = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, cwd="/"
    )
    assert done.returncode == 0, f"{cmd}: {done.stdout[-2000:]}{done.stderr[-2000:]}"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> UserVenv:
    """Built once for the module: the wheel with its runtime dependencies only."""
    for name, url in (
        ("PostgreSQL", services.PG_ADMIN_URL),
        ("RabbitMQ", services.AMQP_URL),
        ("Redis", services.REDIS_URL),
    ):
        services.require(name, url)
    v = UserVenv(tmp_path_factory.mktemp("user"))
    v.install()
    return v


@contextmanager
def _empty_database(pool: databases.BackendPool, name: str) -> Iterator[tuple[str, sa.Engine]]:
    with pool.database(name, migrated=False) as url:
        engine = create_engine(url)
        try:
            yield url, engine
        finally:
            engine.dispose()


def test_a_plain_install_has_no_test_or_bench_packages(venv: UserVenv) -> None:
    """The environment really is a user's: pytest, matplotlib and PyMySQL are absent."""
    check = (
        "import importlib.util as u\n"
        "print([m for m in ('pytest', 'matplotlib', 'pymysql') if u.find_spec(m)])"
    )
    out = subprocess.run(
        [venv.bin / "python", "-c", check], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stderr
    # Without the extra, a MySQL URL is refused naming the extra that brings its driver.
    refused = venv.relay("migrate", database_url="mysql://root@127.0.0.1/test")
    assert refused.returncode != 0
    assert "pip install 'celery-outbox-relay[mysql]'" in refused.stderr


def _migrate_and_dispatch_once(
    venv: UserVenv, pool: databases.BackendPool, backend: str, events_url: str, exchange: str
) -> None:
    """`relay migrate` on an empty database, 50 events, `relay dispatch --once`: a consumer
    receives every one."""
    with _empty_database(pool, backend) as (url, engine):
        migrated = venv.relay("migrate", database_url=url)
        assert migrated.returncode == 0, migrated.stderr
        collector = Collector(events_url, exchange)
        try:
            ids = enqueue_many(engine, 50)
            out = venv.relay(
                "dispatch", "--once", database_url=url, events_url=events_url, exchange=exchange
            )
            assert out.returncode == 0, out.stderr
            got = collector.drain(50, timeout=30)
        finally:
            collector.close()
    assert sorted(m.outbox_id for m in got) == ids


@pytest.mark.parametrize("events", ["amqp", "redis"])
def test_migrate_then_dispatch_once(
    venv: UserVenv, backend_pool: databases.BackendPool, events: str, exchange_name: str
) -> None:
    """On PostgreSQL, to RabbitMQ and again to Redis."""
    events_url = services.AMQP_URL if events == "amqp" else services.REDIS_URL
    _migrate_and_dispatch_once(venv, backend_pool, "postgresql", events_url, exchange_name)


def test_celery_worker_and_beat_with_redis_as_the_broker(
    venv: UserVenv, backend_pool: databases.BackendPool, exchange_name: str
) -> None:
    """`celery -A relay worker` and `celery -A relay beat` with RELAY_BROKER_URL=redis://
    start from the plain install and deliver events (to Redis too) that a consumer receives."""
    broker = services.REDIS_URL.rsplit("/", 1)[0] + "/3"
    queue = f"relay-{uuid.uuid4().hex[:8]}"
    settings = {"broker_url": broker, "exchange": exchange_name, "queue": queue}
    with _empty_database(backend_pool, "postgresql") as (url, engine):
        assert venv.relay("migrate", database_url=url).returncode == 0
        collector = Collector(broker, exchange_name)
        try:
            ids = enqueue_many(engine, 200)
            with (
                venv.process(
                    "worker",
                    "-A",
                    "relay",
                    "worker",
                    "-P",
                    "solo",
                    "-Q",
                    queue,
                    database_url=url,
                    **settings,
                ),
                venv.process(
                    "beat",
                    "-A",
                    "relay",
                    "beat",
                    "-s",
                    str(venv.folder / "beat"),
                    database_url=url,
                    **settings,
                ),
            ):
                got = collector.drain(200, timeout=90)
                logs = venv.log("worker") + venv.log("beat")
        finally:
            collector.close()
    assert "ModuleNotFoundError" not in logs
    assert sorted(m.outbox_id for m in got) == ids, logs


def test_the_mysql_extra_against_mariadb(
    venv: UserVenv, backend_pool: databases.BackendPool, exchange_name: str
) -> None:
    """`pip install 'celery-outbox-relay[mysql]'` is all MariaDB needs: migrate, then relay."""
    services.require("MariaDB", services.MYSQL_ADMIN_URL)
    venv.install("[mysql]")
    _migrate_and_dispatch_once(venv, backend_pool, "mysql", services.AMQP_URL, exchange_name)
    assert os.path.isdir(venv.cwd / "relay-broker" / "queues")  # `relay migrate` made them
