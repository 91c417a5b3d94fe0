"""A JetStream stream of the test's own on the NATS server of ``services.NATS_URL``, and
what the relay stored in it, read back with nats-py (a throwaway consumer, no broker double),
connected as the relay connects (the URL's TLS options and credentials: nats_connect).

Each test gets a unique stream name and subject prefix (its ``RELAY_EXCHANGE``), so tests never
see each other's messages; the stream is deleted at teardown, also when the test failed.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from relay.config import Settings


@dataclass(frozen=True)
class Stored:
    """One message of the stream: its subject, headers and body."""

    subject: str
    headers: dict[str, str]
    body: bytes
    seq: int


@dataclass(frozen=True)
class Stream:
    """The stream a test's relay publishes to: ``RELAY_NATS_STREAM`` and ``RELAY_EXCHANGE``."""

    url: str
    name: str
    exchange: str

    def env(self) -> dict[str, str]:
        """The variables that point a relay at this stream."""
        return {"events_url": self.url, "nats_stream": self.name, "exchange": self.exchange}

    def settings(self, database_url: str, **overrides: Any) -> Settings:
        """The relay's ``Settings`` for ``database_url`` publishing to this stream."""
        return Settings(
            database_url=database_url,
            events_url=self.url,
            exchange=self.exchange,
            nats_stream=self.name,
            **overrides,
        )

    def messages(self) -> list[Stored]:
        """Every message in the stream, in stream order (empty when there is no stream)."""
        return asyncio.run(_read(self.url, self.name))

    def info(self) -> Any:
        """The stream's ``StreamInfo``."""
        return asyncio.run(_call(self.url, lambda js: js.stream_info(self.name)))

    def create(self, **config: Any) -> None:
        """Create the stream beforehand (subjects ``<exchange>.>``), with ``config``."""
        subjects = [f"{self.exchange}.>"]
        asyncio.run(
            _call(self.url, lambda js: js.add_stream(name=self.name, subjects=subjects, **config))
        )

    def delete(self) -> None:
        import nats.js.errors

        with contextlib.suppress(nats.js.errors.NotFoundError):
            asyncio.run(_call(self.url, lambda js: js.delete_stream(self.name)))


async def _call(url: str, do: Any) -> Any:
    from relay.publishers import nats_connect

    nc = await nats_connect.connect(url, timeout=3)
    try:
        return await do(nc.jetstream(timeout=5))
    finally:
        await nc.close()


async def _read(url: str, name: str) -> list[Stored]:
    import nats.errors
    import nats.js.errors

    from relay.publishers import nats_connect

    nc = await nats_connect.connect(url, timeout=3)
    try:
        js = nc.jetstream(timeout=5)
        try:
            total = (await js.stream_info(name)).state.messages
        except nats.js.errors.NotFoundError:
            return []
        from nats.js.api import AckPolicy, ConsumerConfig

        # Nothing acknowledged: no cap of unacknowledged messages stops the read.
        config = ConsumerConfig(ack_policy=AckPolicy.NONE)
        sub = await js.pull_subscribe("", stream=name, config=config)
        out: list[Stored] = []
        while len(out) < total:
            try:
                batch = await sub.fetch(min(1000, total - len(out)), timeout=5)
            except nats.errors.TimeoutError:
                break
            for msg in batch:
                seq = msg.metadata.sequence.stream
                out.append(Stored(msg.subject, dict(msg.headers or {}), msg.data, seq))
        await sub.unsubscribe()
        return out
    finally:
        await nc.close()


def drain(settings: Any, wrap: Any = None) -> None:
    """Relay every claimable row of ``settings``' database to its events URL in this process
    (a real publisher, optionally wrapped by ``wrap``), then close what it opened."""
    from relay import publishers
    from relay.dispatch.dispatcher import Dispatcher

    publisher = publishers.for_settings(settings)
    dispatcher = Dispatcher.from_settings(
        settings, publisher=wrap(publisher) if wrap else publisher
    )
    try:
        dispatcher.drain()
    finally:
        publisher.close()
        dispatcher.store.dispose()
