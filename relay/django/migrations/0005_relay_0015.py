"""Incident levers (pauses, rate buckets, a deliver-by deadline): Alembic revision 0015."""

from typing import Any, ClassVar

from django.db import migrations

from relay.django.alembic_bridge import operation

forwards, backwards = operation("0015", "0014")


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no type information
    # Alembic opens its own connection: no Django transaction may hold locks it would wait on.
    atomic = False
    dependencies: ClassVar[list[tuple[str, str]]] = [("relay", "0004_relay_0014")]
    operations: ClassVar[list[Any]] = [migrations.RunPython(forwards, backwards)]
