"""celery-outbox-relay: the transactional outbox for Celery deployments.

Application code calls :func:`enqueue` inside its business transaction; the relay publishes the
event to a Kombu exchange at least once, with the outbox id as ``message_id``.

The producer API is loaded on first use, so importing a light layer (``relay.policy``,
``relay.config``) never pulls SQLAlchemy in.
"""

from __future__ import annotations

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
    from relay.producer import Producer, configure, enqueue, lock_keys

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
        from relay import producer

        return getattr(producer, name)
    raise AttributeError(f"module 'relay' has no attribute {name!r}")
