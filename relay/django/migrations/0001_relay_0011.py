"""The relay's tables, up to Alembic revision 0011 (the relay's own chain does the work)."""

from typing import Any, ClassVar

from django.db import migrations

from relay.django.alembic_bridge import operation

forwards, backwards = operation("0011", "base")


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no type information
    # Alembic opens its own connection: no Django transaction may hold locks it would wait on.
    atomic = False
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[Any]] = [migrations.RunPython(forwards, backwards)]
