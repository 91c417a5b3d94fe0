"""Publishing a replay to a NATS JetStream subject (``relay replay --to-subject``).

A replayed message is the original one (:func:`relay.publishers.message.prepare`, converted
by :mod:`relay.publishers.nats_message`) sent to the operator's subject instead of
``<exchange>.<event_type>``, plus the replay header (``x-relay-replay``), with two changes:

- its ``Nats-Msg-Id`` is ``<event_id>:<replay_id>``: the stream that stored the first delivery
  would otherwise drop the replayed copy as a duplicate within its window, while a window of
  this replay published twice (a relay-side retry) is still stored once;
- the stream is never created: it must already capture the subject (:func:`check_subject`,
  before anything is sent), whichever stream that is; the report names it.

The event id header and ``ce-id`` stay the event's, so a consumer's inbox still dedupes on the
event, as for a replay to a queue.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext

from relay.exceptions import BrokerUnavailable, ReplayRefused
from relay.publishers import message, nats_connect, nats_message
from relay.publishers.jetstream import JetStreamPublisher
from relay.publishers.kombu_connection import describe
from relay.publishers.message import REPLAY_HEADER
from relay.publishers.signatures import Keyring
from relay.records import ClaimedEvent


def valid_subject(subject: str) -> str:
    """``subject`` if a publish may use it, else ReplayRefused: dot-separated tokens, none
    empty, no white space, no wildcard."""
    tokens = subject.split(".")
    if not subject or any(not t or t in ("*", ">") or any(c.isspace() for c in t) for t in tokens):
        raise ReplayRefused(
            f"--to-subject: {subject!r} is no subject a message can be published to "
            "(dot-separated tokens, none empty, no white space or wildcard)"
        )
    return subject


def check_subject(url: str, subject: str, *, timeout: float = 10.0) -> str:
    """The name of the stream that captures ``subject`` on ``url``'s server;
    :class:`~relay.exceptions.ReplayRefused` when none does (a publish would find no
    responder), :class:`~relay.exceptions.BrokerUnavailable` when the server does not answer."""
    valid_subject(subject)
    nats_connect.parse(url)  # ValueError before anything is sent

    async def find() -> str | None:
        nc = await nats_connect.connect(url, timeout=timeout)
        try:
            return str(await nc.jetstream(timeout=timeout).find_stream_name_by_subject(subject))
        except nats.js.errors.NotFoundError:
            return None
        finally:
            await nc.close()

    try:
        stream = asyncio.run(asyncio.wait_for(find(), timeout * 2))
    except (TimeoutError, nats.errors.Error, OSError) as exc:
        raise BrokerUnavailable(f"NATS JetStream unreachable: {describe(exc)}") from exc
    if stream is None:
        raise ReplayRefused(
            f"--to-subject: no JetStream stream captures {subject!r}; a replay publishes only "
            "to a subject an existing stream captures (nats stream add); nothing was sent"
        )
    return stream


class JetStreamReplayPublisher(JetStreamPublisher):
    """:class:`~relay.publishers.jetstream.JetStreamPublisher` with every message sent to one
    subject, marked as replay ``replay_id``, into whichever stream captures the subject."""

    def __init__(
        self,
        url: str,
        exchange: str,
        subject: str,
        replay_id: str,
        *,
        confirm_timeout: float = 10.0,
    ) -> None:
        super().__init__(
            url, exchange, stream="", duplicate_window=0.0, confirm_timeout=confirm_timeout
        )
        self.subject, self.replay_id = valid_subject(subject), replay_id

    async def _ensure_stream(self, js: JetStreamContext) -> None:
        """Find the stream that captures the subject (never create one) and its size limit."""
        try:
            self.stream = str(await js.find_stream_name_by_subject(self.subject))
            info = await js.stream_info(self.stream)
        except nats.js.errors.NotFoundError as exc:
            raise BrokerUnavailable(
                f"no JetStream stream captures {self.subject!r} any more"
            ) from exc
        except (nats.errors.Error, TimeoutError) as exc:
            raise BrokerUnavailable(f"JetStream unavailable: {describe(exc)}") from exc
        self.stream_max_msg_size = max(0, info.config.max_msg_size or 0)

    def _message(self, event: ClaimedEvent) -> nats_message.NatsMessage:
        """The event's message to the replay's subject, with the replay header and a message
        id of this replay's own (``<event_id>:<replay_id>``)."""
        prepared = message.prepare(event, self.keyring)
        prepared = replace(prepared, headers={**prepared.headers, REPLAY_HEADER: self.replay_id})
        msg = nats_message.from_message(prepared, self.exchange, subject=self.subject)
        event_id = msg.headers[nats_message.MSG_ID]
        headers = {**msg.headers, nats_message.MSG_ID: f"{event_id}:{self.replay_id}"}
        return replace(msg, headers=headers)


def for_subject(
    url: str,
    exchange: str,
    subject: str,
    replay_id: str,
    *,
    confirm_timeout: float = 10.0,
    signing_keys: str | None = None,
) -> JetStreamReplayPublisher:
    """The publisher of replay ``replay_id`` to ``subject`` on ``url``'s NATS server, signing
    as the relay does when ``signing_keys`` are given."""
    publisher = JetStreamReplayPublisher(
        url, exchange, subject, replay_id, confirm_timeout=confirm_timeout
    )
    publisher.keyring = Keyring.from_text(signing_keys)
    return publisher


__all__ = ["JetStreamReplayPublisher", "check_subject", "for_subject", "valid_subject"]
