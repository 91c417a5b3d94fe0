"""Every error the relay raises derives from :class:`RelayError`.

Tree (and where each is raised)::

    RelayError                  retryable = False unless a subclass says otherwise
    ├── ConfigError             a RELAY_* setting has a bad value (names the variable)
    │                             relay.config, relay.store.engine (a URL that does not parse)
    ├── EventError              enqueue() refused an event (names the field); nothing was written
    │                             relay.produce.enqueue; also a ValueError
    ├── SelectorError           an operator's action selected nothing and did not say "all"
    │                             relay.store.filters
    ├── StoreError              the outbox database failed
    │   │                         relay.store (SQLAlchemy errors, ``from exc``)
    │   └── DatabaseUnavailable the database could not be reached; retryable
    └── PublishError            the events broker failed, or refused one message
        │                         relay.publishers
        ├── EventUnsendable     a claimed row cannot become a message (the row's fault, never
        │                         retried: it is dead-lettered at once with this reason)
        │                         relay.publishers.message (build), the publishers (encode)
        └── BrokerUnavailable   the broker could not be reached, or confirmed nothing in time;
                                  retryable: the batch is given back, the breaker opens
                                  relay.publishers (Kombu/py-amqp/redis errors, ``from exc``)

Whether an error is worth retrying is the class attribute ``retryable``, read where errors
are caught (the dispatcher, the lease keeper, the publishers' reconnect), never a string match.
Each class's docstring is its default message.
"""

from __future__ import annotations


class RelayError(Exception):
    """The relay failed."""

    retryable: bool = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigError(RelayError):
    """A RELAY_* setting has a bad value."""


class EventError(RelayError, ValueError):
    """The event was refused; nothing was written."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"event refused: {field} {problem}")


class SelectorError(RelayError):
    """The action names no rows: give ids, a filter or all."""


class StoreError(RelayError):
    """The outbox database failed."""


class DatabaseUnavailable(StoreError):
    """The outbox database could not be reached."""

    retryable = True


class PublishError(RelayError):
    """The events broker failed."""


class EventUnsendable(PublishError):
    """The event cannot become a message."""


class BrokerUnavailable(PublishError):
    """The events broker could not be reached."""

    retryable = True
