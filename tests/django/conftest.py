"""Django configured by hand for the tests of ``relay.django``, and only for them.

Not pytest-django: its test-database machinery (one test database per alias, each test wrapped
in a transaction, database access blocked elsewhere) is what these tests must avoid: they
need real commits, on the suite's per-test copies of the migrated template (and empty
databases for ``migrate``), on three backends, from several threads. So the suite's own
fixtures make the database, and the ``django_db`` fixture points Django's ``default`` alias at
it for one test. Nothing outside this package configures or imports Django.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
import sqlalchemy as sa

# mysqlclient needs the MySQL client headers to build; PyMySQL (the suite's MySQL driver
# already, which reports a mysqlclient-compatible version_info) stands in for it under
# Django's MySQL backend.
pymysql.install_as_MySQLdb()

import django  # noqa: E402  (after the MySQLdb shim)
from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure(
        INSTALLED_APPS=["relay.django"],
        DATABASES={},
        USE_TZ=True,
        TIME_ZONE="UTC",
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        LOGGING_CONFIG=None,
    )
    django.setup()

from django.db import connections  # noqa: E402

from tests.support import databases  # noqa: E402


def django_settings(url: str) -> dict[str, Any]:
    """Django's DATABASES entry for a test database's SQLAlchemy URL."""
    u = sa.make_url(url)
    if u.get_backend_name() == "sqlite":
        # Writers queue for the lock (BEGIN IMMEDIATE) instead of failing, as the relay's own
        # engine does; docs/django.md recommends the same OPTIONS.
        options = {"transaction_mode": "IMMEDIATE", "timeout": 30}
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": u.database, "OPTIONS": options}
    engine = {"postgresql": "postgresql", "mysql": "mysql"}[u.get_backend_name()]
    entry: dict[str, Any] = {
        "ENGINE": f"django.db.backends.{engine}",
        "NAME": u.database,
        "USER": u.username or "",
        "PASSWORD": u.password or "",
        "HOST": u.host or "",
        "PORT": str(u.port or ""),
    }
    if engine == "mysql":
        entry["OPTIONS"] = {"isolation_level": "read committed"}
    return entry


def use_database(url: str, alias: str = "default") -> None:
    """Point Django's ``alias`` at ``url`` for this thread and every thread opened later."""
    close(alias)
    connections.settings[alias] = connections.configure_settings({alias: django_settings(url)})[
        alias
    ]


def close(alias: str = "default") -> None:
    """Close this thread's connection of ``alias`` (a thread closes its own)."""
    if alias in connections.settings:
        connections[alias].close()
        with contextlib.suppress(AttributeError):  # this thread never opened it
            del connections[alias]


@pytest.fixture
def django_db(db_url: str) -> Iterator[str]:
    """Django's ``default`` alias on a fresh migrated database of each backend; its URL."""
    use_database(db_url)
    yield db_url
    close()
    reset()


@pytest.fixture(params=databases.ENABLED)
def empty_url(request: pytest.FixtureRequest, backend_pool: databases.BackendPool) -> Iterator[str]:
    """An empty database (no relay tables), once per backend; Django's ``default`` on it."""
    with backend_pool.database(request.param, migrated=False) as url:
        use_database(url)
        yield url
        close()
        reset()


def reset(alias: str = "default") -> None:
    """Leave ``alias`` on Django's dummy backend again."""
    connections.settings[alias] = connections.configure_settings({})[alias]
