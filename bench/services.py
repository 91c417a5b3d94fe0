"""Where the benchmark's services are, which versions ran, and the throw-away databases and
exchanges a measurement gets: created for it, removed after it."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import kombu
import redis
import sqlalchemy as sa

from relay.store.schema import upgrade

#: Admin URLs of the database servers (a database is created per measurement on each).
ADMIN_URLS = {
    "postgresql": os.environ.get(
        "BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    ),
    "mariadb": os.environ.get("BENCH_MARIADB_URL", "mysql+pymysql://root@127.0.0.1:3306/mysql"),
}
PG_ADMIN_URL = ADMIN_URLS["postgresql"]
AMQP_URL = os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


def git_revision(path: str | None = None) -> str | None:
    """The checkout's short commit (``+dirty`` with uncommitted changes); with ``path``, the
    commit that last changed that file. None outside a git checkout."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    try:
        if path is not None:
            return git("log", "-1", "--format=%h", "--", path) or None
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", "relay", "bench")
        return git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


@contextlib.contextmanager
def source_of(revision: str) -> Iterator[str]:
    """The ``relay`` package of git ``revision``, unpacked in a temporary folder: put it on a
    relay process's ``PYTHONPATH`` (and migrate its database from it, :func:`database`) to run
    that revision beside the checkout (``--baseline REV``)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory(prefix="relay-rev-") as tmp:
        archive = subprocess.run(
            ["git", "-C", root, "archive", revision, "relay"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        yield tmp


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


@contextlib.contextmanager
def database(
    label: str, kind: str = "postgresql", source: str | None = None, admin_url: str | None = None
) -> Iterator[str]:
    """A fresh database ``relay_bench_<label>_<nonce>`` of ``kind`` (postgresql, mariadb or
    sqlite) migrated to head (of the ``relay`` package under ``source``, when given: another
    revision's chain), on the server of ``admin_url`` (default: the shared one of ``kind``);
    dropped at exit."""
    name = f"relay_bench_{label}_{uuid.uuid4().hex[:8]}"
    if kind == "sqlite":
        root = tempfile.mkdtemp(prefix="relay-bench-")
        try:
            url = f"sqlite:///{root}/{name}.sqlite3"
            upgrade.upgrade(url)
            yield url
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return
    postgres = kind == "postgresql"
    quoted = f'"{name}"' if postgres else f"`{name}`"
    # pre-ping: a pooled admin connection may have been terminated while the benchmark ran.
    admin_url = admin_url or ADMIN_URLS[kind]
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {quoted}"))
        url = sa.make_url(admin_url).set(database=name).render_as_string(False)
        if source is None:
            upgrade.upgrade(url)
        else:
            code = (
                "import sys; from relay.store.schema import upgrade; upgrade.upgrade(sys.argv[1])"
            )
            env = {**os.environ, "PYTHONPATH": source}
            subprocess.run([sys.executable, "-c", code, url], env=env, check=True)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {quoted}{' WITH (FORCE)' * postgres}"))
        admin.dispose()


@dataclass
class Route:
    """A durable topic exchange with one durable queue bound to it with ``#``."""

    url: str
    exchange_name: str
    queue_name: str

    def _objects(self, channel: Any) -> tuple[kombu.Exchange, kombu.Queue]:
        exchange = kombu.Exchange(self.exchange_name, type="topic", durable=True)
        queue = kombu.Queue(self.queue_name, exchange, routing_key="#", durable=True)
        return exchange(channel), queue(channel)

    def declare(self) -> None:
        with kombu.Connection(self.url) as conn:
            exchange, queue = self._objects(conn.default_channel)
            exchange.declare()
            queue.declare()

    def purge(self) -> int:
        """Empty the queue; returns how many messages it held."""
        with kombu.Connection(self.url) as conn:
            _, queue = self._objects(conn.default_channel)
            return int(queue.purge() or 0)

    @property
    def is_redis(self) -> bool:
        return self.url.startswith(("redis://", "rediss://"))

    def depth(self) -> int:
        """Messages waiting in the queue."""
        with kombu.Connection(self.url) as conn:
            channel: Any = conn.default_channel
            if self.is_redis:  # a virtual queue "exists" only while it holds messages
                return int(channel._size(self.queue_name))
            _, queue = self._objects(channel)
            declared: Any = queue.queue_declare(passive=True)
            return int(declared.message_count)

    def delete(self) -> None:
        with kombu.Connection(self.url) as conn:
            exchange, queue = self._objects(conn.default_channel)
            with contextlib.suppress(Exception):
                queue.delete()
            with contextlib.suppress(Exception):
                exchange.delete()
        if self.is_redis:  # Kombu leaves the exchange's binding sets behind
            client = redis.Redis.from_url(self.url)
            try:
                client.delete(
                    f"_kombu.binding.{self.exchange_name}",
                    f"_kombu.binding_permanent.{self.exchange_name}",
                    self.queue_name,
                )
            finally:
                client.close()


@contextlib.contextmanager
def route(url: str, label: str) -> Iterator[Route]:
    """A unique exchange ``bench.<label>.<nonce>`` and its bound queue; deleted at exit."""
    name = f"bench.{label}.{uuid.uuid4().hex[:8]}"
    r = Route(url, name, f"{name}.q")
    r.declare()
    try:
        yield r
    finally:
        r.delete()


def delete_queue(name: str, url: str = AMQP_URL) -> None:
    """Delete queue ``name`` if it exists (a Celery fleet's task queue, for one)."""
    with kombu.Connection(url) as conn, contextlib.suppress(Exception):
        kombu.Queue(name, channel=conn.default_channel).delete()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _package(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _server_version(kind: str, query: str) -> str:
    engine = sa.create_engine(ADMIN_URLS[kind])
    try:
        with engine.connect() as conn:
            return str(conn.execute(sa.text(query)).scalar())
    finally:
        engine.dispose()


def versions() -> dict[str, Any]:
    """Versions of the servers, the interpreter and the libraries on the hot path."""
    with kombu.Connection(AMQP_URL) as conn:
        conn.ensure_connection(max_retries=1)
        rabbit = conn.connection.server_properties.get("version", "unknown")
        rabbit = rabbit.decode() if isinstance(rabbit, bytes) else str(rabbit)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        redis_version = client.info("server")["redis_version"]
    finally:
        client.close()
    return {
        "postgresql": _server_version("postgresql", "SHOW server_version"),
        "mariadb": _server_version("mariadb", "SELECT version()"),
        "sqlite": sqlite3.sqlite_version,
        "rabbitmq": rabbit,
        "redis": str(redis_version),
        "python": sys.version.split()[0],
        "kombu": _package("kombu"),
        "amqp": _package("amqp"),
        "sqlalchemy": _package("sqlalchemy"),
        "psycopg": _package("psycopg"),
        "redis_py": _package("redis"),
        "celery": _package("celery"),
        "relay": _package("celery-outbox-relay"),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }
