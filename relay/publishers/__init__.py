"""Publishers: one module per kind of broker behind :func:`for_url`; the only code that talks to
the events broker.

- :mod:`relay.publishers.amqp`: RabbitMQ (py-amqp) with publisher confirms; encodes a batch's
  frames itself (:mod:`relay.publishers.frames`).
- :mod:`relay.publishers.virtual`: Kombu's virtual transports (Redis, the embedded filesystem
  one, memory), which have no confirms.

Both share the connection handling of :mod:`relay.publishers.kombu_connection` and translate Kombu's
and the client libraries' errors into :class:`~relay.exceptions.BrokerUnavailable` and
:class:`~relay.exceptions.PublishError`. Importing this package loads no broker library; the
factory does, for the kind it builds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from relay.records import ClaimedEvent, PublishResult

#: Kombu's names (``Connection.transport_cls``) of the transports that speak AMQP 0-9-1.
AMQP_TRANSPORTS = frozenset({"amqp", "pyamqp", "amqps"})


class Publisher(Protocol):
    """Publishes a batch and reports, per event, what the broker confirmed."""

    def publish(self, events: Sequence[ClaimedEvent]) -> PublishResult: ...

    def close(self) -> None: ...


def for_url(
    url: str,
    exchange: str,
    *,
    confirm_timeout: float = 10.0,
    on_blocked: Callable[[str | None], None] | None = None,
    signing_keys: str | None = None,
) -> Publisher:
    """The publisher for a Kombu URL: AMQP with confirms, or a virtual transport's.
    ``on_blocked`` is told when an AMQP broker blocks publishing (the reason) and unblocks
    it (None): a gauge. ``signing_keys`` (``RELAY_SIGNING_KEYS``) signs every event
    (:mod:`relay.publishers.signatures`).

    Registers the relay's transports first (:func:`relay.publishers.transports.register`), so
    ``filesystem://`` is the relay's atomic variant. Connects lazily, on the first publish.
    """
    import kombu

    from relay.publishers import transports
    from relay.publishers.kombu_connection import KombuPublisher
    from relay.publishers.signatures import Keyring

    transports.register()
    publisher: KombuPublisher
    if kombu.Connection(transports.broker_tls(url)[0]).transport_cls in AMQP_TRANSPORTS:
        from relay.publishers.amqp import AmqpPublisher

        publisher = AmqpPublisher(
            url, exchange, confirm_timeout=confirm_timeout, on_blocked=on_blocked
        )
    else:
        from relay.publishers.virtual import VirtualPublisher

        publisher = VirtualPublisher(url, exchange, confirm_timeout=confirm_timeout)
    publisher.keyring = Keyring.from_text(signing_keys)
    return publisher


__all__ = ["AMQP_TRANSPORTS", "PublishResult", "Publisher", "for_url"]
