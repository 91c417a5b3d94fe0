"""Where the benchmark's services are, and which versions of everything ran."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import Any

import kombu
import redis
import sqlalchemy as sa

PG_ADMIN_URL = os.environ.get(
    "BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
AMQP_URL = os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


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


def versions() -> dict[str, Any]:
    """Versions of the servers, the interpreter and the libraries on the hot path."""
    engine = sa.create_engine(PG_ADMIN_URL)
    try:
        with engine.connect() as conn:
            pg = conn.execute(sa.text("SHOW server_version")).scalar()
    finally:
        engine.dispose()
    with kombu.Connection(AMQP_URL) as conn:
        conn.ensure_connection(max_retries=1)
        props = conn.connection.server_properties
        rabbit = props.get("version", "unknown")
        rabbit = rabbit.decode() if isinstance(rabbit, bytes) else str(rabbit)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        redis_version = client.info("server")["redis_version"]
    finally:
        client.close()
    return {
        "postgresql": str(pg),
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
