"""Apply the relay's Alembic chain, which ships inside the package (works from a wheel)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config

from relay.config.urls import normalize_url

SCRIPT_LOCATION = "relay:migrations"


def alembic_config(database_url: str) -> Config:
    """An Alembic config for the relay's chain against ``database_url``."""
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    # ConfigParser interpolation treats % specially; URL-encoded passwords contain it.
    cfg.set_main_option("sqlalchemy.url", normalize_url(database_url).replace("%", "%%"))
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the outbox schema up to ``revision``."""
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    """Take the outbox schema down to ``revision`` (``base`` drops the table)."""
    command.downgrade(alembic_config(database_url), revision)


def check(database_url: str) -> None:
    """Raise if the database's schema and ``relay.store.schema.tables`` disagree
    (``alembic check``)."""
    command.check(alembic_config(database_url))
