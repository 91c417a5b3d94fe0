"""The system check of the relay's schema: ``manage.py check --database default`` (and
``manage.py migrate``, which runs database checks) say when the tables are missing or behind
the installed relay."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core import checks
from django.db import router

from relay.django import alembic_bridge

HINT_MIGRATE = "Run `python manage.py migrate {label} --database {alias}` (or `relay migrate`)."


@checks.register(checks.Tags.database)  # type: ignore[untyped-decorator]
def check_schema(
    app_configs: Any = None, databases: Iterable[str] | None = None, **_: Any
) -> list[checks.CheckMessage]:
    """relay.W001: the relay's tables are missing; relay.W002: they are at an older revision
    than this relay's head; relay.E001: at a revision this relay does not know (a newer relay
    migrated the database). Only the databases Django asks about that the relay migrates."""
    found: list[checks.CheckMessage] = []
    for alias in databases or ():
        if not router.allow_migrate(alias, alembic_bridge.APP_LABEL):
            continue
        found += _check(alias)
    return found


def _check(alias: str) -> list[checks.CheckMessage]:
    hint = HINT_MIGRATE.format(label=alembic_bridge.APP_LABEL, alias=alias)
    try:
        at = alembic_bridge.current(alias)
    except Exception as exc:  # unreachable database: Django's own checks report it
        return [
            checks.Warning(
                f"the relay could not read its schema version on database {alias!r}: {exc}",
                id="relay.W003",
            )
        ]
    head = alembic_bridge.head()
    if at is None:
        return [
            checks.Warning(
                f"the relay's tables are missing on database {alias!r} (migrate creates them)",
                hint=hint,
                id="relay.W001",
            )
        ]
    if at == head:
        return []
    if at in alembic_bridge.known_revisions():
        return [
            checks.Warning(
                f"the relay's schema on database {alias!r} is at revision {at}, "
                f"behind this relay's {head}",
                hint=hint,
                id="relay.W002",
            )
        ]
    return [
        checks.Error(
            f"the relay's schema on database {alias!r} is at revision {at}, which this relay "
            f"(head {head}) does not know: a newer celery-outbox-relay migrated it",
            hint="Install the celery-outbox-relay version that migrated this database.",
            id="relay.E001",
        )
    ]
