"""The relay's purge lease and sent counts (retention): Alembic revision 0013."""

from typing import Any, ClassVar

from django.db import migrations

from relay.django.alembic_bridge import operation

forwards, backwards = operation("0013", "0012")


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no type information
    # Alembic opens its own connection: no Django transaction may hold locks it would wait on.
    atomic = False
    dependencies: ClassVar[list[tuple[str, str]]] = [("relay", "0002_relay_0012")]
    operations: ClassVar[list[Any]] = [migrations.RunPython(forwards, backwards)]
