"""The wake-up needs no trigger (writers pay nothing for it): Alembic revision 0014."""

from typing import Any, ClassVar

from django.db import migrations

from relay.django.alembic_bridge import operation

forwards, backwards = operation("0014", "0013")


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no type information
    # Alembic opens its own connection: no Django transaction may hold locks it would wait on.
    atomic = False
    dependencies: ClassVar[list[tuple[str, str]]] = [("relay", "0003_relay_0013")]
    operations: ClassVar[list[Any]] = [migrations.RunPython(forwards, backwards)]
