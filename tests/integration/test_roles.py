"""The three least-privilege roles of docs/postgresql.md, granted exactly as documented there
(the SQL blocks are read from the page): the owner migrates without superuser, producers and the
relay do their jobs, and each is refused what it must not do."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.store.engine import create_engine
from relay.store.operations.store import OperationsStore
from relay.store.schema import upgrade
from tests.support import services
from tests.support.broker import Collector

pytestmark = pytest.mark.timeout(120)

DOC = Path(__file__).parents[2] / "docs" / "postgresql.md"


def documented(block: str, database: str = "postgresql") -> list[str]:
    """The statements of the ``<!-- roles: DATABASE BLOCK -->`` SQL block of the page."""
    match = re.search(
        rf"<!-- roles: {database} {block} -->\n```sql\n(.*?)```", DOC.read_text(), re.S
    )
    assert match, f"docs/postgresql.md has no {block} block"
    return [s.strip() for s in match.group(1).split(";") if s.strip()]


@dataclass
class Roles:
    database: str
    names: dict[str, str]

    admin_url: str = services.PG_ADMIN_URL

    def url(self, role: str) -> str:
        admin = sa.make_url(self.admin_url)
        return admin.set(username=self.names[role], database=self.database).render_as_string(False)

    def sql(self, statements: list[str]) -> list[str]:
        """``statements`` with the page's example names replaced by this test's."""
        out = []
        for s in statements:
            for role, name in self.names.items():
                s = re.sub(rf"\boutbox_{role}\b", name, s)
            s = re.sub(r"\bDATABASE app\b", f'DATABASE "{self.database}"', s)
            out.append(re.sub(r"\bapp\.", f"`{self.database}`.", s))
        return out


@pytest.fixture
def roles() -> Iterator[Roles]:
    """An empty database and three new roles, granted as the page says; all dropped after."""
    services.require("PostgreSQL", services.PG_ADMIN_URL)
    tag = uuid.uuid4().hex[:10]
    names = {k: f"relay_{k}_{tag}" for k in ("owner", "producer", "relay", "writer")}
    r = Roles(f"relay_roles_{tag}", names)
    admin = sa.create_engine(services.PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{r.database}"'))
    in_db = sa.create_engine(
        sa.make_url(services.PG_ADMIN_URL).set(database=r.database), isolation_level="AUTOCOMMIT"
    )
    try:
        with in_db.connect() as conn:
            for statement in r.sql(documented("admin")):
                conn.execute(sa.text(statement))
        yield r
    finally:
        in_db.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{r.database}" WITH (FORCE)'))
            for name in r.names.values():
                conn.execute(sa.text(f'DROP ROLE IF EXISTS "{name}"'))
        admin.dispose()


def _refused(engine: sa.Engine, statement: str) -> bool:
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(statement))
    except (sa.exc.ProgrammingError, sa.exc.OperationalError) as exc:
        text = str(exc)
        return any(w in text for w in ("permission denied", "must be owner", "command denied"))
    return False


def _insert_only_writer_numbers_its_keys(roles: Roles, database: str) -> None:
    """The page's insert-only writer (``roles: DATABASE writer``), created by the administrator,
    writes two keyed rows by plain SQL: the trigger numbers them after the producer's (the
    producer enqueued one event of ``cart-1`` on MariaDB, two on PostgreSQL), and the writer
    may not read or touch the sequence itself."""
    admin = sa.create_engine(
        sa.make_url(roles.admin_url).set(database=roles.database), isolation_level="AUTOCOMMIT"
    )
    writer = create_engine(roles.url("writer"))
    try:
        with admin.connect() as conn:
            for statement in roles.sql(documented("writer", database)):
                conn.execute(sa.text(statement))
        with writer.begin() as conn:
            for n in (1, 2):
                conn.execute(
                    sa.text(
                        "INSERT INTO outbox (event_type, payload, ordering_key)"
                        " VALUES ('plain.keyed', :p, 'cart-1')"
                    ),
                    {"p": json.dumps({"n": n})},
                )
        with admin.connect() as conn:
            numbers = conn.execute(
                sa.text("SELECT seq FROM outbox WHERE event_type = 'plain.keyed' ORDER BY id")
            ).scalars()
            first = 3 if database == "postgresql" else 2
            assert list(numbers) == [first, first + 1]
        for statement in (
            "SELECT last_seq FROM outbox_sequence",
            "UPDATE outbox_sequence SET last_seq = 0",
            "SELECT payload FROM outbox",
        ):
            assert _refused(writer, statement), f"the writer may: {statement}"
    finally:
        writer.dispose()
        admin.dispose()


def _relay(url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    full |= {"RELAY_DATABASE_URL": url, **env}
    return subprocess.run(
        [sys.executable, "-m", "relay", *args], env=full, capture_output=True, text=True, timeout=60
    )


def test_three_roles_work_with_exactly_the_documented_grants(
    roles: Roles, amqp_url: str, exchange_name: str, collector: Collector
) -> None:
    """Owner migrates (not a superuser); a producer enqueues (keyed and plain SQL) and may not
    read, change or delete rows or the schema; the relay dispatches, reports, retries and
    purges and may not insert events or change the schema."""
    owner = create_engine(roles.url("owner"))
    producer = create_engine(roles.url("producer"))
    relay_engine = create_engine(roles.url("relay"))
    try:
        with owner.connect() as conn:
            assert (
                conn.execute(
                    sa.text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
                ).scalar()
                is False
            )
        upgrade.upgrade(roles.url("owner"))
        with owner.begin() as conn:
            for statement in roles.sql(documented("owner")):
                conn.execute(sa.text(statement))

        with Session(producer) as session, session.begin():
            relay.lock_keys(session, ["cart-1"])
            relay.enqueue(session, "shop.order", {"n": 1})
            relay.enqueue(session, "shop.order", {"n": 2}, ordering_key="cart-1")
            relay.enqueue(session, "shop.order", {"n": 3}, ordering_key="cart-1")
        with producer.begin() as conn:
            conn.execute(sa.text("INSERT INTO outbox (event_type, payload) VALUES ('plain', '{}')"))
        _insert_only_writer_numbers_its_keys(roles, "postgresql")
        for statement in (
            "SELECT payload FROM outbox",
            "UPDATE outbox SET status = 'sent'",
            "DELETE FROM outbox",
            "DELETE FROM outbox_sequence",
            "SELECT sent_seq FROM outbox_progress",
            "CREATE TABLE stolen (x int)",
            "DROP TRIGGER relay_outbox_seq ON outbox",
        ):
            assert _refused(producer, statement), f"the producer may: {statement}"

        env = {"RELAY_BROKER_URL": amqp_url, "RELAY_EXCHANGE": exchange_name}
        url = roles.url("relay")
        out = _relay(url, "dispatch", "--once", **env)
        assert out.returncode == 0, out.stderr
        assert len(collector.drain(6, timeout=20)) == 6
        OperationsStore(relay_engine).beat("relay.tick")
        for args in (
            ("status", "--json"),
            ("pending", "list"),
            ("failed", "list"),
            ("failed", "retry", "--event-type", "nothing.*"),
            ("purge-sent", "--older-than", "0s"),
            ("inbox", "purge", "--older-than", "1d"),
        ):
            out = _relay(url, *args, **env)
            assert out.returncode == 0, f"relay {' '.join(args)}: {out.stderr}"
        doctor = {c["name"]: c for c in json.loads(_relay(url, "doctor", "--json", **env).stdout)}
        assert doctor["schema"]["status"] == "pass", doctor
        # SELECT on outbox_id_seq: the wake-up watches it (it would poll without).
        assert doctor["wake-up"]["status"] == "pass", doctor
        with relay_engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM outbox")).scalar() == 0
        for statement in (
            "INSERT INTO outbox (event_type, payload) VALUES ('forged', '{}')",
            "SELECT last_seq FROM outbox_sequence",
            "UPDATE outbox_sequence SET last_seq = 0",
            "CREATE TABLE stolen (x int)",
            "ALTER TABLE outbox ADD COLUMN x int",
            "DROP TABLE relay_inbox",
            "TRUNCATE outbox",
        ):
            assert _refused(relay_engine, statement), f"the relay may: {statement}"
    finally:
        for engine in (owner, producer, relay_engine):
            engine.dispose()


@pytest.fixture
def mariadb_roles() -> Iterator[Roles]:
    """An empty MariaDB database and three new users created as the page says; all dropped."""
    services.require("MariaDB", services.MYSQL_ADMIN_URL)
    tag = uuid.uuid4().hex[:10]
    names = {k: f"relay_{k[:4]}_{tag}" for k in ("owner", "producer", "relay", "writer")}
    r = Roles(f"relay_roles_{tag}", names, services.MYSQL_ADMIN_URL)
    admin = sa.create_engine(services.MYSQL_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE `{r.database}`"))
            for statement in r.sql(documented("admin", "mariadb")):
                conn.execute(sa.text(statement))
        yield r
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS `{r.database}`"))
            for name in r.names.values():
                conn.execute(sa.text(f"DROP USER IF EXISTS '{name}'@'%'"))
        admin.dispose()


def test_three_users_work_with_exactly_the_documented_grants_on_mariadb(
    mariadb_roles: Roles, amqp_url: str, exchange_name: str, collector: Collector
) -> None:
    """MariaDB: the owner migrates with database-level privileges only; a producer enqueues
    and may not read, change or delete rows; the relay dispatches and purges, no DDL."""
    r = mariadb_roles
    producer = create_engine(r.url("producer"))
    relay_engine = create_engine(r.url("relay"))
    admin = sa.create_engine(services.MYSQL_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        upgrade.upgrade(r.url("owner"))
        with admin.connect() as conn:
            for statement in r.sql(documented("tables", "mariadb")):
                conn.execute(sa.text(statement))
        with Session(producer) as session, session.begin():
            relay.lock_keys(session, ["cart-1"])
            relay.enqueue(session, "shop.order", {"n": 1})
            relay.enqueue(session, "shop.order", {"n": 2}, ordering_key="cart-1")
        _insert_only_writer_numbers_its_keys(r, "mariadb")
        for statement in (
            "SELECT payload FROM outbox",
            "UPDATE outbox SET status = 'sent'",
            "DELETE FROM outbox",
            "CREATE TABLE stolen (x int)",
        ):
            assert _refused(producer, statement), f"the producer may: {statement}"
        env = {"RELAY_BROKER_URL": amqp_url, "RELAY_EXCHANGE": exchange_name}
        out = _relay(r.url("relay"), "dispatch", "--once", **env)
        assert out.returncode == 0, out.stderr
        assert len(collector.drain(4, timeout=20)) == 4
        for args in (("status", "--json"), ("purge-sent", "--older-than", "0s")):
            out = _relay(r.url("relay"), *args, **env)
            assert out.returncode == 0, f"relay {' '.join(args)}: {out.stderr}"
        for statement in (
            "INSERT INTO outbox (event_type, payload) VALUES ('forged', '{}')",
            "SELECT last_seq FROM outbox_sequence",
            "CREATE TABLE stolen (x int)",
            "DROP TABLE relay_inbox",
        ):
            assert _refused(relay_engine, statement), f"the relay may: {statement}"
    finally:
        for engine in (producer, relay_engine, admin):
            engine.dispose()
