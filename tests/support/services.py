"""Where the test services are; a missing one skips the test on a laptop and fails it in CI."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

import pytest

IN_CI = bool(os.environ.get("CI"))

PG_ADMIN_URL = os.environ.get(
    "RELAY_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
MYSQL_ADMIN_URL = os.environ.get("RELAY_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test")
AMQP_URL = os.environ.get("RELAY_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
REDIS_URL = os.environ.get("RELAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def require(name: str, url: str) -> None:
    """Skip (locally) or fail (``CI`` set) the current test when ``url``'s server is down."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port
    assert port is not None, f"{name} URL needs an explicit port: {url}"
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        message = f"{name} is not reachable at {host}:{port} ({exc})"
        if IN_CI:
            pytest.fail(f"{message}; CI requires it", pytrace=False)
        pytest.skip(message)
