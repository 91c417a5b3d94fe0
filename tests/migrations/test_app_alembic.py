"""The recipes of migrations/README.md: the maintainers' Alembic configuration, and an
application's own Alembic history carrying the relay's tables (migrations/app-example/)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from relay.config.urls import normalize_url
from relay.store.schema import upgrade
from relay.store.schema.tables import TABLES
from tests.support import databases

ROOT = Path(__file__).resolve().parents[2]
ALEMBIC = [sys.executable, "-m", "alembic"]


@pytest.fixture(params=databases.ENABLED)
def empty_url(request: pytest.FixtureRequest, backend_pool: databases.BackendPool) -> Iterator[str]:
    with backend_pool.database(request.param, migrated=False) as url:
        yield url


def _app_config(tmp_path: Path, url: str) -> Config:
    """The example application's Alembic config, copied where it may write."""
    app = tmp_path / "app-migrations"
    shutil.copytree(ROOT / "migrations" / "app-example", app)
    cfg = Config(str(app / "alembic.ini"))
    cfg.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return cfg


def test_maintainers_config_compares_the_shipped_chain(tmp_path: Path) -> None:
    """`alembic -c migrations/alembic.ini` reads the chain in relay/migrations/ (one head, no
    copy) and, at head, autogenerate finds nothing to add (`check`, the dry run of
    `revision --autogenerate`)."""
    url = f"sqlite:///{tmp_path / 'dev.sqlite3'}"
    upgrade.upgrade(url)
    env = {**os.environ, "RELAY_DATABASE_URL": url}
    ini = ["-c", str(ROOT / "migrations" / "alembic.ini")]
    heads = subprocess.run([*ALEMBIC, *ini, "heads"], env=env, capture_output=True, text=True)
    assert heads.returncode == 0, heads.stderr
    chain = ScriptDirectory.from_config(upgrade.alembic_config(url))
    assert heads.stdout.split() == [chain.get_current_head(), "(head)"]
    check = subprocess.run([*ALEMBIC, *ini, "check"], env=env, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert "No new upgrade operations detected" in check.stdout + check.stderr
    # No second copy of any revision: the only Python under migrations/ is the app example.
    assert [p for p in (ROOT / "migrations").rglob("*.py") if "app-example" not in p.parts] == []


def test_application_history_with_the_relay_as_a_second_base(
    tmp_path: Path, empty_url: str
) -> None:
    """`alembic upgrade heads` applies the app's base and the relay's chain into one version
    table; autogenerate then sees both metadata agree; downgrading the relay's branch leaves
    the app's tables alone."""
    cfg = _app_config(tmp_path, empty_url)
    relay_head = ScriptDirectory.from_config(upgrade.alembic_config(empty_url)).get_current_head()
    command.upgrade(cfg, "heads")
    engine = sa.create_engine(normalize_url(empty_url))
    try:
        tables = set(sa.inspect(engine).get_table_names())
        assert {"orders", *TABLES} <= tables
        assert "relay_alembic_version" not in tables  # the app's version table holds both
        with engine.connect() as conn:
            versions = set(
                conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars()
            )
        assert versions == {"a1f0c0ffee01", relay_head}
        command.check(cfg)
        command.downgrade(cfg, "0001@base")
        assert set(sa.inspect(engine).get_table_names()) & set(TABLES) == set()
        assert "orders" in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()
