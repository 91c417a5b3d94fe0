"""Every error the relay raises derives from :class:`RelayError`.

Tree (and where each is raised)::

    RelayError                  retryable = False unless a subclass says otherwise
    ├── ConfigError             a RELAY_* setting has a bad value (names the variable)
    │                             relay.config, relay.store.engine (a URL that does not parse)
    ├── EventError              enqueue() refused an event (names the field); nothing was written
    │                             relay.produce.enqueue; also a ValueError
    ├── SelectorError           an operator's action selected nothing and did not say "all"
    │                             relay.store.operations.filters
    ├── ReplayRefused           a replay that cannot start: an unknown queue, nothing to replay
    │                             relay.publishers.queue_replay, relay.replays.replayer
    ├── StoreError              the outbox database failed
    │   │                         relay.store (SQLAlchemy errors, ``from exc``)
    │   ├── DatabaseUnavailable the database could not be reached; retryable
    │   ├── SchemaOutOfDate     the outbox schema is older than this relay needs (names
    │   │                         `relay migrate`); relay.store.schema.compat
    │   └── LockWaitExceeded    a migration waited for its locks longer than it may (names
    │                             who held them); relay.migrations.lock_retries
    └── PublishError            the events broker failed, or refused one message
        │                         relay.publishers
        ├── EventUnsendable     a claimed row cannot become a message (the row's fault, never
        │                         retried: it is dead-lettered at once with this reason)
        │                         relay.publishers.message (build), the publishers (encode)
        ├── MessageRefused      the broker refused one message on its channel (406 size or
        │                         precondition, 404 a task's exchange, 311): that message's
        │                         attempt failed, the rest of the batch goes on
        │                         relay.publishers.amqp (py-amqp channel errors, ``from exc``)
        └── BrokerUnavailable   the broker could not be reached, or confirmed nothing in time;
            │                     retryable: the batch is given back, the breaker opens
            │                     relay.publishers (Kombu/py-amqp/redis errors, ``from exc``)
            └── BrokerBlocked   the broker paused publishing (``connection.blocked``: a memory
                                  or disk alarm); retryable, the connection is kept (it hears
                                  the unblock), no breaker: the relay looks again shortly

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


class ReplayRefused(RelayError):
    """The replay was refused before anything was sent."""


class StoreError(RelayError):
    """The outbox database failed."""


class DatabaseUnavailable(StoreError):
    """The outbox database could not be reached."""

    retryable = True


class SchemaOutOfDate(StoreError):
    """The outbox schema is older than this relay needs: run `relay migrate`."""


class LockWaitExceeded(StoreError):
    """A migration gave up waiting for its locks: the revision in progress rolled back, the
    ones before it stay applied."""


class PublishError(RelayError):
    """The events broker failed."""

    #: Whether the events left unpublished by it are an outage: the connection is dropped and
    #: the breaker opens. False where the connection is sound and the broker only asked
    #: publishers to wait (:class:`BrokerBlocked`).
    outage: bool = True


class MessageRefused(PublishError):
    """The events broker refused the message."""


class EventUnsendable(PublishError):
    """The event cannot become a message."""


class BrokerUnavailable(PublishError):
    """The events broker could not be reached."""

    retryable = True


class BrokerBlocked(BrokerUnavailable):
    """The events broker blocked publishing (a resource alarm)."""

    outage = False


__all__ = [
    "BrokerBlocked",
    "BrokerUnavailable",
    "ConfigError",
    "DatabaseUnavailable",
    "EventError",
    "EventUnsendable",
    "LockWaitExceeded",
    "MessageRefused",
    "PublishError",
    "RelayError",
    "ReplayRefused",
    "SchemaOutOfDate",
    "SelectorError",
    "StoreError",
]
