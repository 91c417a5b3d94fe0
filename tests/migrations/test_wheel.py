"""The migration chain ships in the wheel: `relay migrate` works from an installed package."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support import databases

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def empty_pg_url(backend_pool: databases.BackendPool) -> Iterator[str]:
    """A PostgreSQL database with no outbox schema yet."""
    with backend_pool.database("postgresql", migrated=False) as url:
        yield url


@pytest.mark.timeout(240)
def test_migrations_apply_from_the_built_wheel(empty_pg_url: str, tmp_path: Path) -> None:
    """Build the wheel, unpack it away from the checkout, and migrate an empty database from
    there: the outbox table exists afterwards and `alembic check` holds."""
    pg_url = empty_pg_url
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("celery_outbox_relay-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        zf.extractall(site)
    # Only the package itself: no benchmark harness or results beside it.
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {
        "relay"
    }
    assert "relay/migrations/script.py.mako" in names
    assert any(n.startswith("relay/migrations/versions/0001") for n in names)
    # The web console's templates and static files ship too: it loads nothing from elsewhere.
    assert {"relay/console/templates/base.html", "relay/console/static/console.css"} <= set(names)
    # The package says it is typed (PEP 561), so mypy reads its annotations in an application.
    assert "relay/py.typed" in names
    code = (
        "import sys, relay; from relay.store.schema import upgrade\n"
        f"assert relay.__file__.startswith({str(site)!r}), relay.__file__\n"
        f"relay.migrate({pg_url!r}, 'head'); upgrade.check({pg_url!r})\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        assert "outbox" in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()

    def relay(*args: str) -> subprocess.CompletedProcess[str]:
        env = {
            "PYTHONPATH": str(site),
            "PATH": "/usr/bin:/bin",
            "RELAY_DATABASE_URL": pg_url,
            "RELAY_BROKER_URL": "memory://",
        }
        code = "from relay.commands import main; raise SystemExit(main())"
        return subprocess.run(
            [sys.executable, "-c", code, *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    # For a deploy pipeline: at head, exit 0; for a DBA: the last revision's SQL, offline.
    at_head = relay("migrate", "--check")
    assert at_head.returncode == 0, at_head.stdout + at_head.stderr
    assert "at head" in at_head.stdout
    sql = relay("migrate", "--sql", "--from", "0014")
    assert sql.returncode == 0, sql.stderr
    assert "ALTER TABLE outbox ADD COLUMN expires_at" in sql.stdout
    assert "UPDATE relay_alembic_version SET version_num='0015'" in sql.stdout
    # Taken down a revision, the check fails naming both revisions.
    down = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import relay.migrations; from relay.store.schema import"
            f" upgrade; upgrade.downgrade({pg_url!r}, '0014')",
        ],
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert down.returncode == 0, down.stderr
    behind = relay("migrate", "--check")
    assert behind.returncode == 1, behind.stdout + behind.stderr
    assert "at 0014, head is 0015" in behind.stdout
