"""An application's Alembic environment whose history also holds the relay's tables.

Two bases, one version table: the application's chain and the relay's chain (read from the
installed package through ``version_locations``) are both applied by ``alembic upgrade heads``.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import context

from relay.store.schema.tables import applies_to
from relay.store.schema.tables import metadata as relay_metadata

#: The application's own tables (its models' metadata, in a real application).
app_metadata = sa.MetaData()
orders = sa.Table(
    "orders",
    app_metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("total", sa.Numeric(12, 2), nullable=False),
)

config = context.config


def run_migrations_online() -> None:
    engine = sa.create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as connection:
        dialect = connection.dialect.name

        def include_object(obj: Any, name: Any, type_: str, reflected: bool, other: Any) -> bool:
            # Some relay indexes exist on one database only; Alembic's comparison ignores that.
            return reflected or applies_to(obj, dialect)

        context.configure(
            connection=connection,
            # Both, so that autogenerate neither drops the relay's tables nor misses the app's.
            target_metadata=[app_metadata, relay_metadata],
            include_object=include_object,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
