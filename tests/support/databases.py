"""Per-test databases built from a migrated template, one backend per dialect.

Each backend migrates a template once per session with ``relay migrate``'s code path and hands
every test a fresh copy, so races run on real commits without tests seeing each other's rows.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

from relay.store.schema import tables as schema
from relay.store.schema import upgrade
from tests.support import services

#: (admin URL, name) of each server database this session created and has not dropped yet:
#: what :func:`sweep` looks for at the end of the run.
CREATED: set[tuple[str, str]] = set()


class Backend:
    """How to make a throw-away, migrated database of one kind."""

    name = ""

    def require(self) -> None:
        raise NotImplementedError

    def prepare(self) -> None:
        """Build the migrated template (once per session)."""

    def create(self) -> str:
        """A fresh migrated database; returns its URL."""
        raise NotImplementedError

    def create_empty(self) -> str:
        """A fresh database without the outbox schema; returns its URL."""
        raise NotImplementedError

    def drop(self, url: str) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """Remove the template."""


class ServerBackend(Backend):
    """A database server reached through an admin URL: a template database, one per test."""

    #: Set by subclasses: the admin URL, the service's name, the identifier quote, and the
    #: DROP DATABASE suffix.
    admin_url = ""
    service = ""
    quote = '"'
    drop_suffix = ""

    def __init__(self) -> None:
        self.template = f"relay_tpl_{uuid.uuid4().hex[:10]}"
        self._admin: sa.Engine | None = None

    @property
    def admin(self) -> sa.Engine:
        if self._admin is None:
            # Pre-ping: a session-long admin connection can be cut by a test that restarts or
            # terminates backends (the fault suite), and the final DROP must still work.
            self._admin = sa.create_engine(
                self.admin_url, isolation_level="AUTOCOMMIT", pool_pre_ping=True
            )
        return self._admin

    def q(self, name: str) -> str:
        return f"{self.quote}{name}{self.quote}"

    def url_for(self, database: str) -> str:
        return sa.make_url(self.admin_url).set(database=database).render_as_string(False)

    def require(self) -> None:
        services.require(self.service, self.admin_url)

    def _create_database(self, prefix: str, suffix: str = "") -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        CREATED.add((self.admin_url, name))
        with self.admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {self.q(name)}{suffix}"))
        return name

    def prepare(self) -> None:
        CREATED.add((self.admin_url, self.template))
        with self.admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {self.q(self.template)}"))
        try:
            upgrade.upgrade(self.url_for(self.template))
        except BaseException:
            self.finish()
            raise

    def create_empty(self) -> str:
        return self.url_for(self._create_database("relay_e"))

    def drop(self, url: str) -> None:
        name = sa.make_url(url).database or ""
        with self.admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {self.q(name)}{self.drop_suffix}"))
        CREATED.discard((self.admin_url, name))

    def finish(self) -> None:
        self.drop(self.url_for(self.template))
        self.admin.dispose()


class PostgresBackend(ServerBackend):
    """PostgreSQL: each test's database is a copy of the migrated template database."""

    name = "postgresql"
    admin_url = services.PG_ADMIN_URL
    service = "PostgreSQL"
    drop_suffix = " WITH (FORCE)"

    def create(self) -> str:
        return self.url_for(self._create_database("relay_t", f" TEMPLATE {self.q(self.template)}"))


class MySQLBackend(ServerBackend):
    """MySQL 8 or MariaDB >= 10.6: a database per test, its tables cloned from the template's
    with ``CREATE TABLE … LIKE`` (indexes, defaults and checks included)."""

    name = "mysql"
    admin_url = services.MYSQL_ADMIN_URL
    service = "MySQL/MariaDB"
    quote = "`"
    TABLES = (*sorted(schema.TABLES), "relay_alembic_version")

    def create(self) -> str:
        name = self._create_database("relay_t")
        try:
            self._clone_template(name)
        except BaseException:
            self.drop(self.url_for(name))
            raise
        return self.url_for(name)

    def _clone_template(self, name: str) -> None:
        target, tpl = self.q(name), self.q(self.template)
        with self.admin.connect() as conn:
            for table in self.TABLES:
                conn.execute(sa.text(f"CREATE TABLE {target}.{table} LIKE {tpl}.{table}"))
            conn.execute(
                sa.text(
                    f"INSERT INTO {target}.relay_alembic_version "
                    f"SELECT * FROM {tpl}.relay_alembic_version"
                )
            )
            # CREATE TABLE … LIKE copies no trigger: re-create the template's (migration 0012's
            # keyed numbering) from their own definitions, in the new database.
            triggers = conn.execute(
                sa.text(
                    "SELECT trigger_name FROM information_schema.triggers"
                    " WHERE trigger_schema = :tpl ORDER BY trigger_name"
                ),
                {"tpl": self.template},
            ).scalars()
            definitions = [
                conn.execute(sa.text(f"SHOW CREATE TRIGGER {tpl}.{self.q(name)}")).one()[2]
                for name in list(triggers)
            ]
            if definitions:
                conn.execute(sa.text(f"USE {target}"))
                for definition in definitions:
                    conn.exec_driver_sql(definition)
                conn.execute(sa.text(f"USE {self.q(sa.make_url(self.admin_url).database or '')}"))


class SQLiteBackend(Backend):
    """A migrated template file, copied per test."""

    name = "sqlite"

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="relay-sqlite-"))
        self.template = self.root / "template.sqlite3"

    def require(self) -> None:
        """Embedded: always available."""

    def prepare(self) -> None:
        url = f"sqlite:///{self.template}"
        upgrade.upgrade(url)
        # Fold the write-ahead log into the file so that copying the file copies everything.
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        engine.dispose()

    def create(self) -> str:
        path = self.root / f"t_{uuid.uuid4().hex[:12]}.sqlite3"
        shutil.copyfile(self.template, path)
        return f"sqlite:///{path}"

    def create_empty(self) -> str:
        return f"sqlite:///{self.root / f'e_{uuid.uuid4().hex[:12]}.sqlite3'}"

    def drop(self, url: str) -> None:
        path = sa.make_url(url).database
        assert path is not None
        for suffix in ("", "-wal", "-shm"):
            Path(path + suffix).unlink(missing_ok=True)

    def finish(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


#: Backends by name; the integration suite runs over every one listed in ``ENABLED``.
BACKENDS: dict[str, Callable[[], Backend]] = {
    "postgresql": PostgresBackend,
    "mysql": MySQLBackend,
    "sqlite": SQLiteBackend,
}
ENABLED = ["postgresql", "mysql", "sqlite"]


class BackendPool:
    """Prepares each backend's template lazily, once per session."""

    def __init__(self) -> None:
        self._ready: dict[str, Backend] = {}

    def get(self, name: str) -> Backend:
        backend = self._ready.get(name)
        if backend is None:
            backend = BACKENDS[name]()
            backend.require()
            backend.prepare()
            self._ready[name] = backend
        else:
            backend.require()
        return backend

    @contextmanager
    def database(self, name: str, *, migrated: bool = True) -> Iterator[str]:
        """A throw-away database of backend ``name``, dropped afterwards."""
        backend = self.get(name)
        url = backend.create() if migrated else backend.create_empty()
        try:
            yield url
        finally:
            backend.drop(url)

    def close(self) -> None:
        for backend in self._ready.values():
            backend.finish()


def sweep() -> list[str]:
    """Drop the databases this session created that still exist, naming each (``server:
    name``) so the run can report them; a server that cannot be reached now is skipped."""
    found: list[str] = []
    for admin_url in sorted({url for url, _ in CREATED}):
        names = {name for url, name in CREATED if url == admin_url}
        engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        postgres = engine.dialect.name == "postgresql"
        listing = (
            "SELECT datname FROM pg_database"
            if postgres
            else "SELECT schema_name FROM information_schema.schemata"
        )
        quote, force = ('"', " WITH (FORCE)") if postgres else ("`", "")
        host = sa.make_url(admin_url).render_as_string(hide_password=True)
        try:
            with engine.connect() as conn:
                for name in sorted(names & set(conn.execute(sa.text(listing)).scalars())):
                    found.append(f"{host}: {name}")
                    conn.execute(sa.text(f"DROP DATABASE IF EXISTS {quote}{name}{quote}{force}"))
        except sa.exc.SQLAlchemyError:
            # The report names what was found; a server gone away is not the run's to fix.
            continue
        finally:
            engine.dispose()
    return found
