"""Django producers: add ``"relay.django"`` to ``INSTALLED_APPS``.

- ``manage.py migrate`` brings the relay's tables to head on the project's database by running
  the relay's own Alembic chain (the schema has one source of truth; ``relay migrate`` on the
  same database agrees with it);
- :func:`enqueue` and :func:`lock_keys` write through Django's connection inside the caller's
  ``transaction.atomic()``, the wake-up goes through ``transaction.on_commit``;
- :func:`send_task` and :class:`TransactionalTask` (in ``relay.django.tasks``, loaded on first
  use, so this package never imports Celery) send Celery tasks through the outbox;
- a system check (``manage.py check --database default``) reports a missing or outdated schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from relay.django.producer import enqueue, lock_keys

if TYPE_CHECKING:
    from relay.django.tasks import TransactionalTask, send_task

__all__ = ["TransactionalTask", "enqueue", "lock_keys", "send_task"]


def __getattr__(name: str) -> Any:
    if name in ("send_task", "TransactionalTask"):
        from relay.django import tasks

        return getattr(tasks, name)
    raise AttributeError(f"module 'relay.django' has no attribute {name!r}")
