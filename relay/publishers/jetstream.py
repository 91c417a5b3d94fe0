"""Publishing to NATS JetStream (``RELAY_EVENTS_URL=nats://...`` or ``tls://...``), where a
republished event is stored once (docs/brokers.md).

Each event carries its event id as ``Nats-Msg-Id`` (:mod:`relay.publishers.nats_message`);
the stream drops a second publish of an id within its duplicate window and acknowledges it
with ``duplicate: true``, which is a success here like any other acknowledgement. A relay
killed between the publish and recording the batch costs no message in the stream when the
next relay publishes the batch again, provided the window outlasts the lease and the longest
wait before a retry (:func:`relay.config.timing.duplicate_window_needed`): the stream is
created with such a window when it is missing, and a shorter one is reported by
``relay doctor`` (and logged at connect).

nats-py is asyncio; the relay's cycle is not. The publisher owns one event loop, run by a
daemon thread of its own, and each call hands it a coroutine and waits with a deadline. A
batch goes out as one burst of publishes with their acknowledgements in flight together,
awaited together, within ``confirm_timeout``.

Faults, by whose they are (docs/guarantees.md): no responders (no stream, JetStream down), a
503, a connection lost or a deadline passed are the broker's: what is not acknowledged is
handed back unpublished (no attempt spent; the breaker counts it) and the connection is
dropped. A message over the server's ``max_payload`` (dead-lettered at once), or one the
stream refuses with another error (an attempt), is the row's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext

from relay.exceptions import BrokerUnavailable, ConfigError, EventUnsendable
from relay.ordering import RunGuard
from relay.publishers import message, nats_connect, nats_message
from relay.publishers.kombu_connection import describe, publishable
from relay.publishers.signatures import Keyring
from relay.records import ClaimedEvent, PublishResult

log = logging.getLogger(__name__)

_T = TypeVar("_T")
#: Publishes awaiting their ack at most: the largest batch a claim can bring.
_IN_FLIGHT = 10_000
#: Client-side waits beyond a call's own deadline before the caller gives up on the loop.
_SLACK_SECONDS = 1.0


class JetStreamPublisher:
    """Publishes to one JetStream stream over one long-lived NATS connection."""

    #: Signs every event published (``RELAY_SIGNING_KEYS``); None: unsigned.
    keyring: Keyring | None = None

    def __init__(
        self,
        url: str,
        exchange: str,
        *,
        stream: str,
        duplicate_window: float,
        confirm_timeout: float = 10.0,
    ) -> None:
        self.url, self.exchange, self.stream = url, exchange, stream
        #: Seconds: the window a stream this publisher creates gets, and the least it accepts.
        self.duplicate_window = duplicate_window
        self.confirm_timeout = confirm_timeout
        #: The server's ``max_payload`` of the current connection (0: not connected).
        self.max_payload = 0
        #: The stream's ``max_msg_size`` (0: no limit of its own).
        self.stream_max_msg_size = 0
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._lost: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()
        #: The acknowledgements of the last batch published.
        self.acks = nats_message.Acks()

    # -- the loop ------------------------------------------------------------------------------
    def _run(self, coro: Coroutine[Any, Any, _T], deadline: float) -> _T:
        """Run ``coro`` on the publisher's loop; past ``deadline`` seconds it is cancelled and
        the broker counts as unavailable (a call that hangs is the connection's fault)."""
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=_run_loop, args=(self._loop,), name="relay-nats", daemon=True
            )
            self._thread.start()
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(deadline + _SLACK_SECONDS)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise BrokerUnavailable(f"NATS call past its {deadline:g} s deadline") from exc

    # -- connection ----------------------------------------------------------------------------
    def connect(self) -> None:
        """Connect and make sure the stream is there (a failure raises BrokerUnavailable)."""
        with self._lock:
            if self._nc is None or self._nc.is_closed:
                self._run(self._connect(), self.confirm_timeout * 2)

    async def _connect(self) -> None:
        lost = asyncio.Event()

        async def closed() -> None:
            lost.set()

        try:
            nc = await nats_connect.connect(
                self.url,
                timeout=self.confirm_timeout,
                name="celery-outbox-relay",
                closed_cb=closed,
                disconnected_cb=closed,
            )
        except ValueError as exc:  # a credential file gone since start-up
            raise BrokerUnavailable(f"RELAY_EVENTS_URL: {exc}") from exc
        try:
            # Room for a whole batch in flight (the claim grows to RELAY_BATCH_MAX, 10,000 at
            # most): a publish never waits on the client's own cap of pending acks.
            js = nc.jetstream(timeout=self.confirm_timeout, publish_async_max_pending=_IN_FLIGHT)
            await self._ensure_stream(js)
        except BaseException:
            await _close(nc)
            raise
        self._nc, self._js, self._lost = nc, js, lost
        self.max_payload = nc.max_payload

    async def _ensure_stream(self, js: JetStreamContext) -> None:
        """Create the stream if missing (subjects ``<exchange>.>``, the relay's duplicate
        window); if present, warn about a window too short to drop a republish."""
        try:
            info = await js.stream_info(self.stream)
        except nats.js.errors.NotFoundError:
            try:
                await js.add_stream(
                    name=self.stream,
                    subjects=[f"{self.exchange}.>"],
                    duplicate_window=self.duplicate_window,
                )
            except (nats.errors.Error, TimeoutError) as exc:
                # Refused (subjects another stream captures, no JetStream account): nothing
                # can be published until an operator acts; an outage meanwhile, with the why.
                raise BrokerUnavailable(
                    f"cannot create JetStream stream {self.stream}: {describe(exc)}"
                ) from exc
            self.stream_max_msg_size = 0
            log.info(
                "created JetStream stream %s on %s.> (duplicate window %g s)",
                self.stream,
                self.exchange,
                self.duplicate_window,
            )
            return
        except (nats.errors.Error, TimeoutError) as exc:
            raise BrokerUnavailable(f"JetStream unavailable: {describe(exc)}") from exc
        self.stream_max_msg_size = max(0, info.config.max_msg_size or 0)
        window = info.config.duplicate_window or 0.0
        if window < self.duplicate_window / 2:
            log.warning(
                "JetStream stream %s keeps message ids %g s, too short to drop every "
                "republish: relay doctor says what to set",
                self.stream,
                window,
            )

    def close(self) -> None:
        """Close the connection and stop the loop; the next publish starts both again."""
        with self._lock:
            nc, self._nc, self._js = self._nc, None, None
            loop, self._loop = self._loop, None
            if loop is None or loop.is_closed():
                return
            if nc is not None:
                try:
                    self._run_on(loop, _close(nc), self.confirm_timeout)
                except Exception as exc:
                    log.debug("closing NATS connection: %s", describe(exc))
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(self.confirm_timeout)

    @staticmethod
    def _run_on(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None], t: float) -> None:
        asyncio.run_coroutine_threadsafe(coro, loop).result(t + _SLACK_SECONDS)

    def _drop(self) -> None:
        """Forget a connection that failed: closed in the background, never waited on."""
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None and self._loop is not None and not self._loop.is_closed():
            asyncio.run_coroutine_threadsafe(_close(nc), self._loop)

    # -- publishing ----------------------------------------------------------------------------
    def publish(self, events: Sequence[ClaimedEvent]) -> PublishResult:
        """Publish ``events`` with their acknowledgements in flight together; report each."""
        with self._lock:
            result = PublishResult()
            try:
                self.connect()
            except BrokerUnavailable as exc:
                result.unavailable.extend(events)
                result.error = exc
                return result
            guard = RunGuard()  # a row refused before sending withholds its key's run
            ready = list(publishable(events, result, guard, self._checked))
            try:
                self._run(self._send(ready, result), self.confirm_timeout)
            except BrokerUnavailable as exc:
                result.error = exc
            done = {e.id for e in result.confirmed} | {e.id for e, _ in result.rejected}
            result.unavailable.extend(e for e, _ in ready if e.id not in done)
            if result.unavailable:
                self._drop()
                result.error = result.error or BrokerUnavailable("JetStream unavailable")
            else:
                result.error = None
            return result

    def _checked(self, event: ClaimedEvent) -> nats_message.NatsMessage:
        """``event``'s NATS message; one over the server's ``max_payload`` or the stream's
        ``max_msg_size`` is the row's fault, found before sending: a refusal after sending
        would come back once the rows of its key behind it were stored."""
        msg = self._message(event)
        for limit, what in (
            (self.max_payload, "the NATS server's max_payload"),
            (self.stream_max_msg_size, f"stream {self.stream}'s max_msg_size"),
        ):
            if limit and msg.size > limit:
                raise EventUnsendable(
                    f"message of {msg.size} bytes is over {what} of {limit} bytes"
                )
        return msg

    def _message(self, event: ClaimedEvent) -> nats_message.NatsMessage:
        """``event`` as the message this publisher sends."""
        return nats_message.from_message(message.prepare(event, self.keyring), self.exchange)

    async def _send(
        self, ready: list[tuple[ClaimedEvent, nats_message.NatsMessage]], result: PublishResult
    ) -> None:
        """Publish ``ready`` in order, then await the acknowledgements until all are in, the
        connection is lost or the deadline passes; record each verdict in ``result``."""
        js, lost = self._js, self._lost
        assert js is not None
        assert lost is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.confirm_timeout
        sent: list[tuple[ClaimedEvent, asyncio.Future[Any]]] = []
        try:
            for event, msg in ready:
                future = await js.publish_async(
                    msg.subject,
                    msg.body,
                    headers=msg.headers,
                    # No wait_stall: with one, nats-py wraps every publish in a task of its
                    # own, a loop turn each, and the flusher writes message by message (3x
                    # the CPU). The batch's deadline bounds the whole send instead.
                )
                sent.append((event, future))
        except (nats.errors.Error, OSError) as exc:
            result.error = BrokerUnavailable(f"NATS publish failed: {describe(exc)}")
        if sent:
            futures = [f for _, f in sent]
            acks: asyncio.Future[Any] = asyncio.gather(*futures, return_exceptions=True)
            gone: asyncio.Future[Any] = asyncio.ensure_future(lost.wait())
            left = max(0.0, deadline - loop.time())
            await asyncio.wait([acks, gone], timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if not acks.done() and result.error is None:
                outstanding = sum(not f.done() for f in futures)
                why = (
                    "connection lost"
                    if gone.done()
                    else f"no ack within {self.confirm_timeout:g} s"
                )
                result.error = BrokerUnavailable(
                    f"JetStream unavailable: {why}, {outstanding} acknowledgements outstanding"
                )
            gone.cancel()
        tally = nats_message.Acks()
        for event, future in sent:
            if not future.done():
                future.cancel()
                continue
            failure = future.exception()
            if failure is None:
                result.confirmed.append(event)
                tally.add(future.result())
            elif isinstance(failure, nats.js.errors.APIError) and not isinstance(
                failure, nats.js.errors.ServiceUnavailableError
            ):
                result.rejected.append((event, f"refused by JetStream: {failure.description}"))
            elif result.error is None:
                result.error = BrokerUnavailable(f"JetStream unavailable: {describe(failure)}")
        self.acks = tally
        if tally.duplicates:
            log.info(
                "JetStream stream %s dropped %d of %d events as already stored (a republish, "
                "stored once); stream sequences %s",
                tally.stream or self.stream,
                tally.duplicates,
                tally.count,
                tally.span(),
            )


def stream_config(url: str, stream: str, *, timeout: float) -> Any:
    """The ``StreamConfig`` of ``stream`` on ``url``'s server, None when there is no such
    stream (``relay doctor``); BrokerUnavailable when the server or JetStream does not answer."""

    try:
        nats_connect.parse(url)
    except ValueError as exc:  # an unknown option, an unreadable TLS one or credential file
        raise ConfigError(f"RELAY_EVENTS_URL: {exc}") from exc

    async def read() -> Any:
        nc = await nats_connect.connect(url, timeout=timeout)
        try:
            return (await nc.jetstream(timeout=timeout).stream_info(stream)).config
        except nats.js.errors.NotFoundError:
            return None
        finally:
            await _close(nc)

    try:
        return asyncio.run(asyncio.wait_for(read(), timeout * 2))
    except (TimeoutError, nats.errors.Error, OSError) as exc:
        raise BrokerUnavailable(f"NATS JetStream unreachable: {describe(exc)}") from exc


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The publisher's thread: its loop until :meth:`JetStreamPublisher.close` stops it."""
    try:
        loop.run_forever()
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


async def _close(nc: Client) -> None:
    try:
        await nc.close()
    except Exception as exc:
        log.debug("closing NATS connection: %s", describe(exc))
