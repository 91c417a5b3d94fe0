"""Where the test services are; a missing one skips the test on a laptop and fails it in CI."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

import pytest

IN_CI = bool(os.environ.get("CI"))
#: Set by ``make test-unit``: the run allows no server, so a test reaching for one fails, up or
#: down, since it does not belong to the fast tier.
NO_SERVICES = bool(os.environ.get("RELAY_TEST_NO_SERVICES"))

PG_ADMIN_URL = os.environ.get(
    "RELAY_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
MYSQL_ADMIN_URL = os.environ.get("RELAY_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test")
AMQP_URL = os.environ.get("RELAY_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
REDIS_URL = os.environ.get("RELAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
#: NATS with JetStream (``nats-server -js``).
NATS_URL = os.environ.get("RELAY_TEST_NATS_URL", "nats://127.0.0.1:4222")


def _connect(url: str) -> None:
    parts = urlsplit(url)
    assert parts.port is not None, f"the URL needs an explicit port: {url}"
    socket.create_connection((parts.hostname or "127.0.0.1", parts.port), timeout=3).close()


def reachable(url: str) -> bool:
    """Whether ``url``'s server accepts TCP connections now."""
    try:
        _connect(url)
    except OSError:
        return False
    return True


def require(name: str, url: str) -> None:
    """Skip (locally) or fail (``CI`` set) the current test when ``url``'s server is down; fail
    it, up or down, when the run allows no server (:data:`NO_SERVICES`)."""
    if NO_SERVICES:
        pytest.fail(
            f"{name}: this run allows no server (RELAY_TEST_NO_SERVICES, `make test-unit`): "
            "a test that needs one belongs outside tests/unit",
            pytrace=False,
        )
    try:
        _connect(url)
    except OSError as exc:
        parts = urlsplit(url)
        message = f"{name} is not reachable at {parts.hostname}:{parts.port} ({exc})"
        if IN_CI:
            pytest.fail(f"{message}; CI requires it", pytrace=False)
        pytest.skip(message)
