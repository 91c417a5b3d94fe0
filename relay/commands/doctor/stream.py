"""``relay doctor`` on a NATS JetStream events broker: the server answers, and the stream keeps
message ids long enough that a republished event is dropped (docs/brokers.md).

A relay that dies after publishing a batch and before recording it leaves the batch to the next
claim, one lease later, or to a retry, after a backoff; JetStream drops the second publish only
while the first one's ``Nats-Msg-Id`` is inside the stream's duplicate window. A shorter window
turns every such republish into a second message in the stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from relay.commands.doctor.verdicts import FAIL, PASS, WARN, Check
from relay.config import Settings, timing
from relay.exceptions import BrokerUnavailable, ConfigError


def checks(settings: Settings) -> Iterator[Check]:
    """The broker's and the stream's checks for a ``nats://`` or ``tls://`` events URL."""
    from relay.publishers import jetstream

    try:
        config = jetstream.stream_config(
            settings.events_connection_url,
            settings.nats_stream,
            timeout=settings.confirm_timeout_seconds,
        )
    except (BrokerUnavailable, ConfigError) as exc:
        yield Check("broker", FAIL, str(exc), "check RELAY_EVENTS_URL and the NATS server (-js)")
        return
    yield Check("broker", PASS, "reachable (NATS JetStream)")
    yield verdict(settings, config)


def verdict(settings: Settings, config: Any) -> Check:
    """The stream check for ``config`` (a ``StreamConfig``, None: no stream yet); pure."""
    needed = timing.duplicate_window_needed(settings.lease_seconds, settings.backoff_max_seconds)
    advised = timing.DUPLICATE_WINDOW_MARGIN * needed
    name, subjects = settings.nats_stream, f"{settings.exchange}.>"
    if config is None:
        return Check(
            "stream",
            WARN,
            f"{name!r} does not exist yet",
            f"start the relay once: it creates it on {subjects} with a {advised:g} s window",
        )
    window = float(config.duplicate_window or 0.0)
    if window < needed:
        return Check(
            "stream",
            FAIL,
            f"{name!r} keeps message ids {window:g} s, less than the lease plus the longest "
            f"retry wait ({needed:g} s): a republished event would be stored twice",
            f"nats stream edit {name} --dupe-window {advised:g}s",
        )
    if subjects not in (config.subjects or []):
        return Check(
            "stream",
            WARN,
            f"{name!r} does not list {subjects} among its subjects {config.subjects}",
            f"add {subjects} to the stream's subjects, or set RELAY_NATS_STREAM to one that has",
        )
    return Check("stream", PASS, f"{name!r}: duplicate window {window:g} s >= {needed:g} s")
