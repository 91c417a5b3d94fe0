"""One per-database runtime for every runner (issue 46): what changes how one database is
relayed reaches the loop runner, the many-databases runner, the process-per-database runner
and the Celery fleet alike, because all four build the database's parts through
:class:`relay.dispatch.runtime.Runtime`.

What is changed here is a connection option of the database's engine, seen from the server:
PostgreSQL's ``application_name``, which the runtime sets to ``relay`` (``relay doctor`` counts
the relay's connections by it) unless the database URL names the connections itself. Before the
runtime, the runners had drifted apart on exactly this: the many-databases runner named its
connections and overrode the URL's name, the loop runner and the Celery fleet did not name them.
A trigger of the test's own database records the ``application_name`` of the session that
claims each row (the lease's UPDATE), so each runner's claim says which engine it came from.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest
import sqlalchemy as sa
from celery import signals

from relay.celery import create_app
from relay.config import Settings
from relay.store.engine import create_engine
from tests.support import databases
from tests.support.broker import Collector
from tests.support.env import relay_env
from tests.support.fleet import RELAY_BIN, TEST_SETTINGS

pytestmark = pytest.mark.timeout(120)

#: Records who claimed each row: the claiming session's application_name.
_CLAIM_LOG = """
CREATE TABLE claim_log (application_name text NOT NULL);
CREATE FUNCTION log_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO claim_log VALUES (current_setting('application_name'));
  RETURN NEW;
END $$;
CREATE TRIGGER log_claim BEFORE UPDATE ON outbox FOR EACH ROW
  WHEN (NEW.status = 'processing' AND OLD.status = 'pending') EXECUTE FUNCTION log_claim();
"""


def _prepared(url: str, events: int = 3) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(_CLAIM_LOG)
            for n in range(events):
                conn.exec_driver_sql(
                    "INSERT INTO outbox (event_type, payload) VALUES ('runtime.check', %s)",
                    (f'{{"n": {n}}}',),
                )
    finally:
        engine.dispose()


def _claimed_by(url: str) -> tuple[set[str], dict[str, int]]:
    """(the application names that claimed rows, rows by status)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            names = set(conn.scalars(sa.text("SELECT application_name FROM claim_log")))
            rows = conn.execute(sa.text("SELECT status, count(*) FROM outbox GROUP BY status"))
            return names, {str(row[0]): int(row[1]) for row in rows}
    finally:
        engine.dispose()


def _named(url: str, name: str | None) -> str:
    """``url`` with ``?application_name=name`` (None: as it is)."""
    if name is None:
        return url
    return (
        sa.make_url(url)
        .update_query_dict({"application_name": name})
        .render_as_string(hide_password=False)
    )


def _dispatch_once(env: dict[str, str], *options: str) -> None:
    done = subprocess.run(
        [RELAY_BIN, "dispatch", "--once", *options],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr


def _loop_runner(urls: list[str], amqp_url: str, exchange: str) -> None:
    """``relay dispatch --once`` over one database (RELAY_DATABASE_URL), once per database."""
    for url in urls:
        env = relay_env(**TEST_SETTINGS, database_url=url, broker_url=amqp_url, exchange=exchange)
        _dispatch_once(env)


def _many_databases(urls: list[str], amqp_url: str, exchange: str, *options: str) -> None:
    """``relay dispatch --once`` over RELAY_DATABASES, in one process within the budget."""
    listed = ",".join(f"db{i}={url}" for i, url in enumerate(urls))
    env = relay_env(**TEST_SETTINGS, databases=listed, broker_url=amqp_url, exchange=exchange)
    _dispatch_once(env, *options)


def _process_per_database(urls: list[str], amqp_url: str, exchange: str) -> None:
    """``relay dispatch --once --process-per-database`` over RELAY_DATABASES."""
    _many_databases(urls, amqp_url, exchange, "--process-per-database")


def _celery_fleet(urls: list[str], amqp_url: str, exchange: str) -> None:
    """The Celery fleet's ``claim_and_dispatch`` task of each database, run in this process by
    the relay's app (the code a worker process runs for it)."""
    listed = ",".join(f"db{i}={url}" for i, url in enumerate(urls))
    settings = Settings(
        databases=listed, broker_url=amqp_url, exchange=exchange, lease_seconds=3, tick_seconds=0.1
    )
    app = create_app(settings)
    try:
        for i in range(len(urls)):
            app.tasks["relay.claim_and_dispatch"](f"db{i}")
    finally:
        # What a worker process does at its end: its runtimes close their publishers and
        # engines (the handlers ignore the sender; a runtime used later builds its parts anew).
        signals.worker_process_shutdown.send(sender=None)


RUNNERS: dict[str, Callable[[list[str], str, str], None]] = {
    "loop": _loop_runner,
    "many-databases": _many_databases,
    "process-per-database": _process_per_database,
    "celery-fleet": _celery_fleet,
}


@pytest.fixture
def two_pg(backend_pool: databases.BackendPool) -> Iterator[list[str]]:
    with ExitStack() as stack:
        yield [stack.enter_context(backend_pool.database("postgresql")) for _ in range(2)]


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_every_runner_relays_a_database_with_the_runtimes_connection_options(
    runner: str,
    two_pg: list[str],
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
) -> None:
    """Each runner claims every row of two PostgreSQL databases on connections named as the
    runtime names them: ``relay`` for the first, whose URL names none, and the second URL's
    own ``application_name``."""
    for url in two_pg:
        _prepared(url)
    RUNNERS[runner]([two_pg[0], _named(two_pg[1], "shop-relay")], amqp_url, exchange_name)
    claims = [_claimed_by(url) for url in two_pg]
    assert claims == [({"relay"}, {"sent": 3}), ({"shop-relay"}, {"sent": 3})]
    assert len(collector.drain(6, timeout=10)) == 6
