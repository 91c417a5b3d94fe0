"""The consumer side: the inbox that makes each message take effect once (public as
``relay.inbox``), the event consumer that runs handlers in one transaction with the inbox claim,
and the dead-letter queues.

``relay.consume.EventConsumer(url, exchange, handlers).run(stop)`` consumes without Celery
(``handlers = QueueHandlers(queue, engine)``, with ``keyring=Keyring.from_text(keys)`` to verify
signed events); ``peek`` and ``redrive`` read and re-drive the dead letters of a queue. The
names are loaded on first use, so that ``relay.inbox`` never pulls Kombu in.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from relay.consume.consumer import Event, EventConsumer, Handler, QueueHandlers
    from relay.consume.deadletters import DeadLetter, DeadLetters, dead_queue_name, peek, redrive
    from relay.publishers.signatures import Keyring

__all__ = [
    "DeadLetter",
    "DeadLetters",
    "Event",
    "EventConsumer",
    "Handler",
    "Keyring",
    "QueueHandlers",
    "dead_queue_name",
    "peek",
    "redrive",
]

_CONSUMER = {"Event", "EventConsumer", "Handler", "QueueHandlers"}


def __getattr__(name: str) -> Any:
    if name == "Keyring":
        return importlib.import_module("relay.publishers.signatures").Keyring
    if name in __all__:
        module = "consumer" if name in _CONSUMER else "deadletters"
        return getattr(importlib.import_module(f"relay.consume.{module}"), name)
    raise AttributeError(f"module 'relay.consume' has no attribute {name!r}")
