"""The Celery glue: the relay's tasks, its beat entries, the after-commit wake-up, tasks sent
through the outbox and event handlers in Celery workers.

``celery -A relay worker|beat`` finds :data:`app` here by Celery's convention (the package has no
``app`` attribute, so Celery imports ``relay.celery``). To add the relay to an application's
existing Celery app instead, call :func:`install` once where that app is built, and let some
workers consume ``RELAY_QUEUE``::

    from relay.celery import install
    install(app, Settings.from_env())

This package and ``relay.commands.demo.run`` (``relay demo``) are the only places that import
Celery. Its modules:

- :mod:`~relay.celery.names`: the task names, a wire contract;
- :mod:`~relay.celery.relay_app`: the relay's own tasks and beat entries (:func:`install`,
  :func:`create_app`), run by a :class:`~relay.dispatch.runtime.Runtime` per database in each
  worker process;
- :mod:`~relay.celery.acks`: :class:`PromptAcks`, a worker's acks sent as soon as its task ran;
- :mod:`~relay.celery.steady`: :class:`BeatScheduler`, beat sleeping until each run is due;
- :mod:`~relay.celery.wakeup`: wake-ups after commits and from beat's watcher;
- :mod:`~relay.celery.transactional`: :func:`send_task` and :class:`TransactionalTask`;
- :mod:`~relay.celery.events`: :func:`on_event` and the worker's event consumer.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from relay.celery.acks import PromptAcks
from relay.celery.events import on_event
from relay.celery.relay_app import celery_config, create_app, install
from relay.celery.steady import BeatScheduler
from relay.celery.transactional import TransactionalTask, send_task
from relay.celery.wakeup import enable_wakeup

app: Celery


def __getattr__(name: str) -> Any:
    # Built on first access, so `from relay.celery import install` reads no environment.
    if name == "app":
        globals()["app"] = created = create_app()
        return created
    raise AttributeError(f"module 'relay.celery' has no attribute {name!r}")


__all__ = [
    "BeatScheduler",
    "PromptAcks",
    "TransactionalTask",
    "app",
    "celery_config",
    "create_app",
    "enable_wakeup",
    "install",
    "on_event",
    "send_task",
]
