"""Shared fixtures: per-test databases over every enabled backend, the broker, settings."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from relay.config import Settings
from relay.store.dispatch_path.store import DispatchStore
from relay.store.engine import create_engine
from relay.store.operations.store import OperationsStore
from tests.support import databases, guard, services
from tests.support import jetstream as jetstream_support
from tests.support.broker import Collector, remove

#: The shared server's start time when the run began (None: not reachable, nothing to guard).
_PG_STARTED = pytest.StashKey[dt.datetime | None]()
#: What the guard found at the end of the run.
_PROBLEMS = pytest.StashKey[list[str]]()


def pytest_sessionstart(session: pytest.Session) -> None:
    # A run that allows no server (`make test-unit`) has none to guard and must not reach one.
    started = None if services.NO_SERVICES else guard.postmaster_started()
    session.config.stash[_PG_STARTED] = started


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run when it stopped the shared PostgreSQL server or left a database behind
    (session fixtures are torn down by now)."""
    found = guard.problems(session.config.stash.get(_PG_STARTED, None))
    session.config.stash[_PROBLEMS] = found
    if found:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for problem in terminalreporter.config.stash.get(_PROBLEMS, []):
        terminalreporter.write_line(f"ERROR (machine not left as found): {problem}", red=True)


@pytest.fixture(scope="session", autouse=True)
def _leaves_no_database() -> Iterator[None]:
    """Set up first, torn down last: a database this process created and left fails the run
    as a teardown error, also on a pytest-xdist worker, whose session status is not the
    run's (the shared server's restart is checked by the controlling process's hooks)."""
    yield
    left = databases.sweep()
    if left:
        pytest.fail(f"databases left behind (dropped now): {', '.join(left)}")


@pytest.fixture(scope="session")
def backend_pool() -> Iterator[databases.BackendPool]:
    pool = databases.BackendPool()
    yield pool
    pool.close()


@pytest.fixture(params=databases.ENABLED)
def empty_url(request: pytest.FixtureRequest, backend_pool: databases.BackendPool) -> Iterator[str]:
    """A database of each enabled kind with no outbox schema yet (`relay migrate` not run)."""
    with backend_pool.database(request.param, migrated=False) as url:
        yield url


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
def pg_engine(pg_url: str) -> Iterator[sa.Engine]:
    """An engine on :func:`pg_url`'s database."""
    eng = create_engine(pg_url)
    yield eng
    eng.dispose()


@pytest.fixture
def store(engine: sa.Engine) -> DispatchStore:
    return DispatchStore(engine)


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


#: Queues tests name after their exchange (the collector's, consumers' and their dead letters).
EXCHANGE_QUEUES = (".q", ".consumer", ".consumer.dead", ".traced", ".traced.dead")


@pytest.fixture
def nats_url() -> str:
    services.require("NATS", services.NATS_URL)
    pytest.importorskip("nats", reason="nats-py is not installed (the [nats] extra)")
    return services.NATS_URL


@pytest.fixture
def jetstream(nats_url: str) -> Iterator[jetstream_support.Stream]:
    """A stream name and subject prefix of this test's own; the stream deleted afterwards."""
    tag = uuid.uuid4().hex[:10]
    stream = jetstream_support.Stream(nats_url, f"RELAYTEST_{tag}", f"relaytest{tag}")
    yield stream
    if services.reachable(nats_url):
        stream.delete()


@pytest.fixture
def exchange_name() -> Iterator[str]:
    """A unique exchange per test, so tests never see each other's messages; removed from
    RabbitMQ afterwards with the queues named after it, also when the test failed."""
    name = f"relay.test.{uuid.uuid4().hex[:10]}"
    yield name
    if services.reachable(services.AMQP_URL):
        remove(services.AMQP_URL, exchange=name, queues=[name + s for s in EXCHANGE_QUEUES])


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
