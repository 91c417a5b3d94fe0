"""celery-outbox-relay: the transactional outbox for Celery deployments.

Application code calls :func:`enqueue` inside its business transaction; the relay publishes the
event to a Kombu exchange at least once, with the row's event id (unique across outboxes) as
``message_id``.

The package, in rooms by role (imports run down this list; ``tests/unit/test_layers.py``
holds it, with no circle):

- ``exceptions``, ``records``, ``policy``, ``ordering``, ``config/``: the error tree, value
  objects, the backoff, per-key ordering, settings (with the lease-derived times in
  ``config.timing`` and URL redaction in ``config.urls``). No I/O, no third-party import; the
  other pure decisions sit beside their users on this floor too (``dispatch.decisions``,
  ``dispatch.batching``, ``dispatch.polling``, ``dispatch.pacing``, ``store.lease_sweep``).
- ``store/``: engines, schema, migrations and the two stores (``dispatch_store``: the relay's
  verbs; ``operations``: the operator's), over ``store/dialects/``, where every SQL statement is
  built.
- ``publishers/``: the message on the wire and one publisher per kind of broker.
- ``produce/``: the producer core (checks, row) and its adapters: ``enqueue`` in the caller's
  sync transaction, ``aio`` (public as ``relay.aio``) in an asyncio one. ``consume/``: inbox,
  event consumer, dead letters. ``observe/``: the observer seam, Prometheus metrics,
  OpenTelemetry tracing.
- ``dispatch/``: one cycle (claim -> publish -> record), the drain and loop, the lease keeper,
  the wake-up watcher, the runner that builds a relay process for the CLI and Celery, and the
  replay of sent events to one queue (public as ``relay.replay``).
- ``celery/`` (the only room importing Celery, with the ``relay demo`` command), ``console/``
  (the web console), ``commands/`` (one module per ``relay`` command); ``testing`` ships the
  in-memory doubles.

The public API is ``relay.__all__`` and the ``__all__`` of the modules the API reference
(docs/api.md) lists; every other module and name is internal and may move in any release.
The producer API and the database helpers are loaded on first use, so importing a light layer
(``relay.policy``, ``relay.config``) never pulls SQLAlchemy in.
"""

from __future__ import annotations

import importlib
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
    from relay.publishers.transports import transport_options
    from relay.replays.replayer import ReplayReport, replay
    from relay.store.engine import create_engine
    from relay.store.schema.upgrade import upgrade as migrate

__all__ = [
    "BrokerUnavailable",
    "ConfigError",
    "DatabaseUnavailable",
    "EventError",
    "Producer",
    "PublishError",
    "RelayError",
    "ReplayReport",
    "Settings",
    "Status",
    "StoreError",
    "configure",
    "create_engine",
    "enqueue",
    "lock_keys",
    "migrate",
    "replay",
    "transport_options",
]
__version__ = "1.1.0"

#: The names loaded on first use: ``(module, attribute)``.
_LAZY = {
    "Producer": ("relay.produce.enqueue", "Producer"),
    "configure": ("relay.produce.enqueue", "configure"),
    "enqueue": ("relay.produce.enqueue", "enqueue"),
    "lock_keys": ("relay.produce.enqueue", "lock_keys"),
    "create_engine": ("relay.store.engine", "create_engine"),
    "migrate": ("relay.store.schema.upgrade", "upgrade"),
    "transport_options": ("relay.publishers.transports", "transport_options"),
    "replay": ("relay.replays.replayer", "replay"),
    "ReplayReport": ("relay.replays.replayer", "ReplayReport"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'relay' has no attribute {name!r}")
