"""Celery tasks through the outbox from Django: :func:`send_task` and the task class
:class:`TransactionalTask`, with the semantics of ``relay.celery.send_task`` (the message is
built there) written through Django's connection in the caller's ``transaction.atomic()``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from relay.celery import transactional
from relay.django import producer


def send_task(
    name: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    countdown: float | None = None,
    eta: datetime | None = None,
    expires: float | datetime | None = None,
    queue: str | None = None,
    routing_key: str | None = None,
    headers: Mapping[str, Any] | None = None,
    ordering_key: str | None = None,
    app: Any = None,
    using: str = "default",
) -> str:
    """Write Celery task ``name`` into the outbox in the open ``atomic()`` block of database
    ``using``; returns its task id. Published once the block committed and the countdown or
    ``eta`` is due, routed as ``app.send_task`` would route it (default: the current app)."""
    options = transactional.TaskOptions(
        countdown=countdown, eta=eta, expires=expires, queue=queue, routing_key=routing_key
    )
    task_id, row = transactional.task_row(
        name, args, kwargs, options, headers=headers, ordering_key=ordering_key, app=app
    )
    producer.write(row, using)
    return task_id


class TransactionalTask(transactional.TransactionalTask):
    """A task class for Django projects: ``Celery(..., task_cls="relay.django:TransactionalTask")``
    gives every task ``add.delay_on_outbox(2, 3)`` and ``add.apply_async_on_outbox((2, 3),
    countdown=60, using="default")``: the transactional twins of ``delay`` and ``apply_async``
    (see :func:`send_task`), besides the SQLAlchemy ``delay_in``/``apply_async_in``."""

    def delay_on_outbox(self, *args: Any, **kwargs: Any) -> str:
        return self.apply_async_on_outbox(args, kwargs)

    def apply_async_on_outbox(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        using: str = "default",
        **options: Any,
    ) -> str:
        return send_task(self.name, args, kwargs, app=self.app, using=using, **options)
