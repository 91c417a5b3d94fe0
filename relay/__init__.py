"""celery-outbox-relay: the transactional outbox for Celery deployments.

Application code calls :func:`enqueue` inside its business transaction; the relay publishes the
event to a Kombu exchange at least once, with the row's event id (unique across outboxes) as
``message_id``.

The package, in rooms by role (imports run down this list; ``tests/unit/test_layers.py``
holds it, with no circle):

- ``exceptions``, ``records``, ``policy``, ``ordering``, ``config/``: the error tree, value
  objects, pure decisions (backoff, breaker, batch sizing, the adaptive poll), per-key ordering,
  settings (with the lease-derived times in ``config.timing`` and URL redaction in
  ``config.urls``). No I/O, no third-party import.
- ``store/``: engines, schema, migrations and the two stores (``dispatch``: the relay's verbs;
  ``operations``: the operator's), over ``store/dialects/``, where every SQL statement is built.
- ``publishers/``: the message on the wire and one publisher per kind of broker.
- ``produce/``: the producer core (checks, row) and its adapters: ``enqueue`` in the caller's
  sync transaction, ``aio`` (public as ``relay.aio``) in an asyncio one. ``consume/``: inbox,
  event consumer, dead letters. ``observe/``: the observer seam, Prometheus metrics,
  OpenTelemetry tracing.
- ``dispatch/``: one cycle (claim -> publish -> record), the drain and loop, the lease keeper,
  the wake-up watcher, the runner that builds a relay process for the CLI and Celery, and the
  replay of sent events to one queue (``relay.dispatch.replay.replay``, for scripts).
- ``celery/`` (the only room importing Celery, with the ``relay demo`` command), ``console/``
  (the web console), ``commands/`` (one module per ``relay`` command); ``testing`` ships the
  in-memory doubles.

The producer API is loaded on first use, so importing a light layer (``relay.policy``,
``relay.config``) never pulls SQLAlchemy in.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from relay.config import Settings
from relay.exceptions import (
    BrokerUnavailable,
    ConfigError,
    DatabaseUnavailable,
    EventError,
    PublishError,
    RelayError,
    StoreError,
)
from relay.records import Status

if TYPE_CHECKING:
    from relay.produce.enqueue import Producer, configure, enqueue, lock_keys

__all__ = [
    "BrokerUnavailable",
    "ConfigError",
    "DatabaseUnavailable",
    "EventError",
    "Producer",
    "PublishError",
    "RelayError",
    "Settings",
    "Status",
    "StoreError",
    "configure",
    "enqueue",
    "lock_keys",
]
__version__ = "0.1.0"

_LAZY = {"Producer", "configure", "enqueue", "lock_keys"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from relay.produce import enqueue as producer

        return getattr(producer, name)
    raise AttributeError(f"module 'relay' has no attribute {name!r}")


#: Modules that moved into the package's rooms, by their old path: ``import relay.engine`` and
#: ``from relay.inbox import claim`` keep working and give the module at its new home.
MOVED = {
    "relay.cli": "relay.commands",
    "relay.commands.cli": "relay.commands",
    "relay.consumer": "relay.consume.consumer",
    "relay.deadletters": "relay.consume.deadletters",
    "relay.demo": "relay.commands.demo_run",
    "relay.demo_report": "relay.commands.demo_report",
    "relay.dialects": "relay.store.dialects",
    "relay.dispatcher": "relay.dispatch.dispatcher",
    "relay.doctor": "relay.commands.doctor",
    "relay.engine": "relay.store.engine",
    "relay.filters": "relay.store.filters",
    "relay.inbox": "relay.consume.inbox",
    "relay.lease": "relay.dispatch.lease",
    "relay.listener": "relay.dispatch.watch",
    "relay.message": "relay.publishers.message",
    "relay.metrics": "relay.observe.metrics",
    "relay.migrate": "relay.store.migrate",
    "relay.operate": "relay.commands.rows",
    "relay.probes": "relay.commands.probe",
    "relay.producer": "relay.produce.enqueue",
    "relay.schema": "relay.store.schema",
    "relay.timestamps": "relay.store.timestamps",
    "relay.tracing": "relay.observe.tracing",
    "relay.timing": "relay.config.timing",
    "relay.transports": "relay.publishers.transports",
    "relay.urls": "relay.config.urls",
    "relay.watch": "relay.commands.status",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a moved module under its old name and hands back the module itself."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        # The import system stamps the alias's spec on what this returns; keep the real one.
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._specs.pop(module.__name__, module.__spec__)


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())
