"""Publishers: one module per kind of broker behind :func:`for_url`; the only code that talks to
the events broker.

- :mod:`relay.publishers.amqp`: RabbitMQ (py-amqp) with publisher confirms; encodes a batch's
  frames itself (:mod:`relay.publishers.frames`).
- :mod:`relay.publishers.virtual`: Kombu's virtual transports (Redis, the embedded filesystem
  one, memory), which have no confirms.
- :mod:`relay.publishers.jetstream`: NATS JetStream (``nats://``, ``tls://``; the ``[nats]``
  extra), where the event id deduplicates a republish; :mod:`relay.publishers.nats_connect`
  reads its URL (servers, TLS, credentials) and connects.

The Kombu two share the connection handling of :mod:`relay.publishers.kombu_connection` and
translate Kombu's and the client libraries' errors into
:class:`~relay.exceptions.BrokerUnavailable` and :class:`~relay.exceptions.PublishError`.
Importing this package loads no broker library; the factory does, for the kind it builds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from relay.config import Settings, timing
from relay.config.urls import redact
from relay.exceptions import ConfigError
from relay.records import ClaimedEvent, PublishResult

if TYPE_CHECKING:
    from relay.publishers.jetstream import JetStreamPublisher

#: Kombu's names (``Connection.transport_cls``) of the transports that speak AMQP 0-9-1.
AMQP_TRANSPORTS = frozenset({"amqp", "pyamqp", "amqps"})
#: The schemes of a NATS server (plain and TLS): published to by JetStream, not Kombu.
NATS_SCHEMES = frozenset({"nats", "tls"})
#: The variable an events URL comes from, named by the errors about it.
EVENTS_VARIABLE = "RELAY_EVENTS_URL"


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
    nats_stream: str = "OUTBOX",
    duplicate_window: float = 660.0,
) -> Publisher:
    """The publisher for a Kombu URL: AMQP with confirms, or a virtual transport's.
    ``on_blocked`` is told when an AMQP broker blocks publishing (the reason) and unblocks
    it (None): a gauge. ``signing_keys`` (``RELAY_SIGNING_KEYS``) signs every event
    (:mod:`relay.publishers.signatures`).

    A ``nats://`` or ``tls://`` URL publishes to JetStream's ``nats_stream``, which it creates
    with ``duplicate_window`` (seconds) if missing (:mod:`relay.publishers.jetstream`).

    Registers the relay's transports first (:func:`relay.publishers.transports.register`), so
    ``filesystem://`` is the relay's atomic variant. Connects lazily, on the first publish. A
    scheme no publisher knows raises ConfigError naming them all.
    """
    from relay.publishers.signatures import Keyring

    if url.partition("://")[0].lower() in NATS_SCHEMES:
        nats_publisher = _jetstream(url, exchange, confirm_timeout, nats_stream, duplicate_window)
        nats_publisher.keyring = Keyring.from_text(signing_keys)
        return nats_publisher

    import kombu

    from relay.publishers import transports
    from relay.publishers.kombu_connection import KombuPublisher

    transports.register()
    publisher: KombuPublisher
    try:
        kind = kombu.Connection(transports.broker_tls(url)[0]).transport_cls
    except (KeyError, ImportError) as exc:  # kombu.transport.resolve_transport
        raise ConfigError(_unknown_scheme(url)) from exc
    if kind in AMQP_TRANSPORTS:
        from relay.publishers.amqp import AmqpPublisher

        publisher = AmqpPublisher(
            url, exchange, confirm_timeout=confirm_timeout, on_blocked=on_blocked
        )
    else:
        from relay.publishers.virtual import VirtualPublisher

        publisher = VirtualPublisher(url, exchange, confirm_timeout=confirm_timeout)
    publisher.keyring = Keyring.from_text(signing_keys)
    return publisher


def for_settings(
    settings: Settings, on_blocked: Callable[[str | None], None] | None = None
) -> Publisher:
    """:func:`for_url` for what ``settings`` describe (``RELAY_EVENTS_URL`` and the rest); a
    stream this creates keeps message ids for
    :func:`~relay.config.timing.duplicate_window_needed`, twice over."""
    needed = timing.duplicate_window_needed(settings.lease_seconds, settings.backoff_max_seconds)
    return for_url(
        settings.events_connection_url,
        settings.exchange,
        confirm_timeout=settings.confirm_timeout_seconds,
        on_blocked=on_blocked,
        signing_keys=settings.signing_keys,
        nats_stream=settings.nats_stream,
        duplicate_window=timing.DUPLICATE_WINDOW_MARGIN * needed,
    )


def _jetstream(
    url: str, exchange: str, confirm_timeout: float, stream: str, window: float
) -> JetStreamPublisher:
    try:
        from relay.publishers import jetstream, nats_connect
    except ImportError as exc:
        raise ConfigError(
            f"{EVENTS_VARIABLE}={redact(url)!r} needs nats-py: pip install "
            "'celery-outbox-relay[nats]'"
        ) from exc
    try:
        nats_connect.parse(url)
    except ValueError as exc:  # an unknown option, an unreadable TLS one, a credential file
        raise ConfigError(f"{EVENTS_VARIABLE}: {exc}") from exc
    return jetstream.JetStreamPublisher(
        url, exchange, stream=stream, duplicate_window=window, confirm_timeout=confirm_timeout
    )


def _unknown_scheme(url: str) -> str:
    """Why ``url`` names no broker: its scheme, and every scheme the relay publishes to."""
    from kombu.transport import TRANSPORT_ALIASES

    known = sorted({*TRANSPORT_ALIASES, *NATS_SCHEMES}, key=str.lower)
    scheme = url.partition("://")[0]
    return (
        f"{EVENTS_VARIABLE}={redact(url)!r}: unknown scheme {scheme!r}; known schemes: "
        f"{', '.join(known)}"
    )


__all__ = [
    "AMQP_TRANSPORTS",
    "EVENTS_VARIABLE",
    "NATS_SCHEMES",
    "PublishResult",
    "Publisher",
    "for_settings",
    "for_url",
]
