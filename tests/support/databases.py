"""Per-test databases built from a migrated template, one backend per dialect.

Each backend migrates a template once per session with ``relay migrate``'s code path and hands
every test a fresh copy, so races run on real commits without tests seeing each other's rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from relay import migrate
from tests.support import services


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

    def drop(self, url: str) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """Remove the template."""


class PostgresBackend(Backend):
    name = "postgresql"

    def __init__(self) -> None:
        self.template = f"relay_tpl_{uuid.uuid4().hex[:10]}"
        self._admin: sa.Engine | None = None

    @property
    def admin(self) -> sa.Engine:
        if self._admin is None:
            self._admin = sa.create_engine(services.PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        return self._admin

    def url_for(self, database: str) -> str:
        return sa.make_url(services.PG_ADMIN_URL).set(database=database).render_as_string(False)

    def require(self) -> None:
        services.require("PostgreSQL", services.PG_ADMIN_URL)

    def prepare(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{self.template}"'))
        migrate.upgrade(self.url_for(self.template))

    def create(self) -> str:
        name = f"relay_t_{uuid.uuid4().hex[:12]}"
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"'))
        return self.url_for(name)

    def drop(self, url: str) -> None:
        name = sa.make_url(url).database
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    def finish(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{self.template}" WITH (FORCE)'))
        self.admin.dispose()


#: Backends by name; the integration suite runs over every one listed in ``ENABLED``.
BACKENDS: dict[str, Callable[[], Backend]] = {"postgresql": PostgresBackend}
ENABLED = ["postgresql"]


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
    def database(self, name: str) -> Iterator[str]:
        backend = self.get(name)
        url = backend.create()
        try:
            yield url
        finally:
            backend.drop(url)

    def close(self) -> None:
        for backend in self._ready.values():
            backend.finish()
