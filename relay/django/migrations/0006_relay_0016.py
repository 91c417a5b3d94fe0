"""Room on each outbox page for a row's next versions (fillfactor, PostgreSQL): Alembic revision
0016."""

from typing import Any, ClassVar

from django.db import migrations

from relay.django.alembic_bridge import operation

forwards, backwards = operation("0016", "0015")


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no type information
    # Alembic opens its own connection: no Django transaction may hold locks it would wait on.
    atomic = False
    dependencies: ClassVar[list[tuple[str, str]]] = [("relay", "0005_relay_0015")]
    operations: ClassVar[list[Any]] = [migrations.RunPython(forwards, backwards)]
