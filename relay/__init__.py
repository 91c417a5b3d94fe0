"""celery-outbox-relay: the transactional outbox for Celery deployments.

Application code calls :func:`enqueue` inside its business transaction; the relay publishes the
event to a Kombu exchange at least once, with the outbox id as ``message_id``.
"""

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
from relay.producer import Producer, configure, enqueue
from relay.records import Status

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
]
__version__ = "0.1.0"
