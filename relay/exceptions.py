"""Every error the relay raises derives from :class:`RelayError`.

Tree::

    RelayError
    ├── ConfigError             a RELAY_* setting has a bad value (names the variable)
    ├── EventError              enqueue() refused an event (names the field); nothing was written
    ├── StoreError              the outbox database failed
    │   └── DatabaseUnavailable the database could not be reached; retryable
    └── PublishError            the events broker failed
        └── BrokerUnavailable   the broker could not be reached; retryable, opens the breaker

Whether an error is worth retrying is the class attribute ``retryable``, never a string match.
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


class StoreError(RelayError):
    """The outbox database failed."""


class DatabaseUnavailable(StoreError):
    """The outbox database could not be reached."""

    retryable = True


class PublishError(RelayError):
    """The events broker failed."""


class BrokerUnavailable(PublishError):
    """The events broker could not be reached."""

    retryable = True
