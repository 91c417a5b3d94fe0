"""celery-outbox-relay: the transactional outbox for Celery deployments.

Application code calls :func:`enqueue` inside its business transaction; the relay publishes the
event to a Kombu exchange at least once, with the row's event id (unique across outboxes) as
``message_id``.

The package, in rooms by role (imports run down this list, a floor at a time;
``tests/unit/test_layers.py`` holds it, with no circle):

- ``exceptions``, ``records``, ``policy``, ``ordering``, ``config/``, ``threads``: the error
  tree, value objects, the backoff, per-key ordering, settings (with the lease-derived times in
  ``config.timing`` and URL redaction in ``config.urls``), the background threads' lifecycle.
  No I/O, no third-party import; the
  other pure decisions sit on this floor too, beside their users (``dispatch.decisions``,
  ``dispatch.batching``, ``wakeup.polling``, ``retention.pacing``,
  ``store.dispatch_path.lease_sweep``).
- ``store/``: engines and the outbox's SQL: ``store/dispatch_path/`` (the relay's verbs while
  it relays), ``store/operations/`` (the operator's), ``store/schema/`` (tables, the migration
  chain's application, event ids), over ``store/dialects/``, where every SQL statement is
  built. ``publishers/``: the message on the wire and one publisher per kind of broker.
  ``observe/``: the observer seam, Prometheus metrics, OpenTelemetry tracing. ``testing``:
  the in-memory doubles.
- ``produce/``: the producer core (checks, row) and its adapters, public as ``relay.enqueue``
  and ``relay.aio``; ``migrations/``: the Alembic chain.
- ``dispatch/``: one database's cycle (claim -> publish -> record, the drain, the lease keeper),
  built by ``dispatch.runtime``, the one per-database runtime every runner uses.
  ``consume/``: inbox (public as ``relay.inbox``), event consumer, dead letters. ``wakeup/``:
  how a relay learns of committed rows. ``retention/``: the purge of sent rows. ``replays/``:
  sent events published again to one queue (public as ``relay.replay``).
- ``runners/``: what decides when and how many databases are relayed (``relay dispatch``'s
  loop, many databases in one process, a process per database).
- ``celery/``: the relay's tasks, the fleet over several databases, tasks sent through the
  outbox, event handlers (the only room importing Celery, with ``relay demo``'s
  ``commands.demo.run``). ``console/``: the web console. ``django/``: the Django producers.
- ``commands/``: one module per ``relay`` command, with ``commands/doctor/`` (the doctor's
  checks) and ``commands/demo/``.

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
    from relay.store.operations.pausing import Pause, pause, paused, resume
    from relay.store.schema.upgrade import upgrade as migrate

__all__ = [
    "BrokerUnavailable",
    "ConfigError",
    "DatabaseUnavailable",
    "EventError",
    "Pause",
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
    "pause",
    "paused",
    "replay",
    "resume",
    "transport_options",
]
__version__ = "1.1.0"

#: The names loaded on first use, by the module that defines them (under the same name, but
#: ``migrate``: :func:`relay.store.schema.upgrade.upgrade`).
_LAZY_FROM = {
    "relay.produce.enqueue": ("Producer", "configure", "enqueue", "lock_keys"),
    "relay.store.engine": ("create_engine",),
    "relay.store.schema.upgrade": ("migrate",),
    "relay.publishers.transports": ("transport_options",),
    "relay.replays.replayer": ("replay", "ReplayReport"),
    "relay.store.operations.pausing": ("Pause", "pause", "paused", "resume"),
}
#: ``name -> (module, attribute)``.
_LAZY = {name: (module, name) for module, names in _LAZY_FROM.items() for name in names}
_LAZY["migrate"] = ("relay.store.schema.upgrade", "upgrade")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'relay' has no attribute {name!r}")
