"""The relay's per-key numbering trigger: Alembic revision 0012."""

from typing import Any, ClassVar

from django.db import migrations

from relay.django.alembic_bridge import operation

forwards, backwards = operation("0012", "0011")


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no type information
    # Alembic opens its own connection: no Django transaction may hold locks it would wait on.
    atomic = False
    dependencies: ClassVar[list[tuple[str, str]]] = [("relay", "0001_relay_0011")]
    operations: ClassVar[list[Any]] = [migrations.RunPython(forwards, backwards)]
