"""Shared fixtures: per-test databases over every enabled backend, the broker, settings."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from relay.config import Settings
from relay.store.dispatch import Store
from relay.store.engine import create_engine
from relay.store.operations import OperationsStore
from tests.support import databases, services
from tests.support.broker import Collector


@pytest.fixture(scope="session")
def backend_pool() -> Iterator[databases.BackendPool]:
    pool = databases.BackendPool()
    yield pool
    pool.close()


@pytest.fixture(params=databases.ENABLED)
def db_url(request: pytest.FixtureRequest, backend_pool: databases.BackendPool) -> Iterator[str]:
    """A fresh, migrated outbox database, once per enabled backend."""
    with backend_pool.database(request.param) as url:
        yield url


@pytest.fixture
def pg_url(backend_pool: databases.BackendPool) -> Iterator[str]:
    """A fresh, migrated PostgreSQL outbox database."""
    with backend_pool.database("postgresql") as url:
        yield url


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    eng = create_engine(db_url)
    yield eng
    eng.dispose()


@pytest.fixture
def store(engine: sa.Engine) -> Store:
    return Store(engine)


@pytest.fixture
def operations(engine: sa.Engine) -> OperationsStore:
    return OperationsStore(engine)


@pytest.fixture
def amqp_url() -> str:
    services.require("RabbitMQ", services.AMQP_URL)
    return services.AMQP_URL


@pytest.fixture
def redis_url() -> str:
    services.require("Redis", services.REDIS_URL)
    return services.REDIS_URL


@pytest.fixture
def exchange_name() -> str:
    """A unique exchange per test, so tests never see each other's messages."""
    return f"relay.test.{uuid.uuid4().hex[:10]}"


@pytest.fixture
def collector(amqp_url: str, exchange_name: str) -> Iterator[Collector]:
    """A queue bound with ``#`` to the test's exchange on RabbitMQ."""
    c = Collector(amqp_url, exchange_name)
    yield c
    c.close()


@pytest.fixture
def settings(db_url: str, amqp_url: str, exchange_name: str) -> Settings:
    return Settings(
        database_url=db_url,
        broker_url=amqp_url,
        exchange=exchange_name,
        batch_size=50,
        lease_seconds=10,
        confirm_timeout_seconds=5,
        max_attempts=3,
        backoff_base_seconds=0.05,
        backoff_max_seconds=0.2,
        tick_seconds=0.1,
    )
