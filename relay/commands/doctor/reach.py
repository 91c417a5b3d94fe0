"""Whether the outbox database and the events broker answer: the one set of reachability checks
``relay doctor`` and ``relay probe ready`` share. A failure comes as the relay's own error,
raised where SQLAlchemy's and Kombu's errors are translated (the store, the publishers):
:class:`~relay.exceptions.DatabaseUnavailable` (a :class:`~relay.exceptions.StoreError`) and
:class:`~relay.exceptions.BrokerUnavailable`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from relay.config import Settings

if TYPE_CHECKING:
    from relay.store.operations.health import HealthStore

#: How long a check waits for the broker to accept a connection.
BROKER_TIMEOUT_SECONDS = 5


def database(store: HealthStore) -> None:
    """The database answers a query; StoreError (DatabaseUnavailable when unreachable) if not."""
    store.ping()


@contextlib.contextmanager
def broker(settings: Settings) -> Iterator[Any]:
    """A Kombu connection to the events broker, connected (publishing nothing, declaring
    nothing); BrokerUnavailable when it refuses. On NATS (no Kombu connection: None), the
    server's JetStream answered a question about the stream."""
    if settings.events_on_nats:
        from relay.publishers import jetstream

        url, stream = settings.events_connection_url, settings.nats_stream
        jetstream.stream_config(url, stream, timeout=BROKER_TIMEOUT_SECONDS)
        yield None
        return
    from relay.publishers.kombu_connection import connection

    with connection(settings.events_connection_url, timeout=BROKER_TIMEOUT_SECONDS) as conn:
        yield conn
