"""Replaying sent events to one queue: ``relay replay``, the console, and scripts.

The public entry point is :func:`replay`, re-exported as ``relay.replay``::

    import relay

    report = relay.replay("billing", event_type="order.*", since=timedelta(hours=24))
    if not report.complete:
        print(report.describe())  # how far it got; resume with after=report.resume_after

The CLI and the console call :func:`replay_selected` with their parsed filter.

Only ``sent`` rows are replayed, those sent when the replay starts (its horizon: the highest id
then selected), read a page at a time in id order (so a key's events keep their
order) and published to the queue alone (:mod:`relay.publishers.queue_replay`), a window at a time,
each window confirmed before the next; the rows are never changed. A replay stops at the first
event the broker did not confirm, or when told to stop (``stop``: the CLI sets it on SIGTERM),
and its report names the last id confirmed with every id before it: run it again with
``after`` = that id to go on without sending any event twice. Every replay that sent is
recorded in the audit table and logged on the ``relay.audit`` logger, and counted in
``relay_events_replayed_total``.
"""

from __future__ import annotations

import getpass
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from relay.config import Settings
from relay.config.databases import pick
from relay.config.settings import REPLAY_ONLY
from relay.exceptions import ReplayRefused, StoreError
from relay.publishers import Publisher
from relay.publishers.queue_replay import check_queue, for_queue
from relay.records import ClaimedEvent, Status
from relay.replays.report import ReplayReport
from relay.store.operations.actions import Actor, Changed
from relay.store.operations.filters import EventFilter
from relay.store.operations.store import OperationsStore
from relay.store.schema.eventids import default_source

log = logging.getLogger(__name__)
audit_log = logging.getLogger("relay.audit")

#: Ids per page read from the database: a bounded range of the primary key, so a page costs
#: the same in a table of millions whatever the planner's statistics say.
PAGE = 1000
#: Most messages published before their confirms are awaited (without ``rate``).
WINDOW = 500
#: With a rate, windows are sized so that about this many go out per second (smooth pacing).
WINDOWS_PER_SECOND = 20


def replay(
    to_queue: str | None = None,
    ids: Sequence[int] = (),
    *,
    event_type: str | None = None,
    key: str | None = None,
    error: str | None = None,
    since: datetime | timedelta | None = None,
    until: datetime | timedelta | None = None,
    all_sent: bool = False,
    after: int | None = None,
    dry_run: bool = False,
    rate: float | None = None,
    settings: Settings | None = None,
    source: str | None = None,
    stop: threading.Event | None = None,
    to_subject: str | None = None,
) -> ReplayReport:
    """Publish sent events again to the existing queue ``to_queue`` alone (the broker's default
    exchange), or on NATS JetStream to ``to_subject`` (a subject an existing stream captures;
    instead of ``to_queue``): the original messages plus the ``x-relay-replay`` header, in id
    order, confirmed, the rows unchanged. Select with ``ids``, ``event_type`` (a glob:
    ``order.*``), ``key``,
    ``error``, ``since``/``until`` (a time, or a duration ago), or ``all_sent=True``; nothing
    without one (:class:`~relay.exceptions.SelectorError`). ``dry_run``: count, publish
    nothing. ``rate``: events a second at most. ``after``: only ids above it (to resume).
    ``settings``: default ``Settings.from_env()``; ``source``: the database of
    ``RELAY_DATABASES`` to replay from. ``stop``: set it to stop after the window in flight.

    Raises :class:`~relay.exceptions.ReplayRefused` before sending anything when the queue does
    not exist, sent rows are deleted at send, or the rate is not positive. A replay cut short
    (the broker, ``stop``) returns a report that is not ``complete``: call again with
    ``after=report.resume_after``. Audited as the OS user, via ``python``."""
    chosen = settings if settings is not None else Settings.from_env(only=REPLAY_ONLY)
    f = EventFilter(
        statuses=(Status.SENT,),
        ids=tuple(ids),
        event_type=event_type,
        key=key,
        error=error,
        since=since,
        until=until,
        all=all_sent,
    )
    return replay_selected(
        pick(chosen, source)[1],
        f,
        to_queue=to_queue,
        to_subject=to_subject,
        after=after,
        dry_run=dry_run,
        rate=rate,
        stop=stop,
    )


def replay_selected(
    settings: Settings,
    selector: EventFilter,
    *,
    to_queue: str | None = None,
    to_subject: str | None = None,
    after: int | None = None,
    dry_run: bool = False,
    rate: float | None = None,
    actor: Actor | None = None,
    stop: threading.Event | None = None,
    on_window: Callable[[ReplayReport], None] | None = None,
    store: OperationsStore | None = None,
) -> ReplayReport:
    """:func:`replay` with a parsed filter (the CLI's and the console's): publish the sent rows
    ``selector`` selects (ids, filters or ``all=True``; never nothing) again to queue
    ``to_queue`` alone (or to NATS subject ``to_subject``), ``rate`` events a second at most;
    with ``dry_run`` count them and publish nothing. ``after``: only ids above it (resuming a
    replay).
    ``actor``: who, for the audit (default: this OS user, via ``python``). ``on_window`` is
    called after each confirmed window. Raises :class:`~relay.exceptions.ReplayRefused` before
    sending anything (unknown queue, deleted-at-send rows, a bad rate) and
    :class:`~relay.exceptions.SelectorError` for an empty selector."""
    if settings.delete_on_send:
        raise ReplayRefused(
            "RELAY_DELETE_ON_SEND: sent rows are deleted when they are sent (also with "
            "RELAY_RETENTION_SECONDS=0), so there is nothing to replay"
        )
    if rate is not None and not rate > 0:
        raise ReplayRefused(f"--rate: {rate!r} is not a positive number of events per second")
    if (to_queue is None) == (to_subject is None):
        raise ReplayRefused("a replay goes to one queue (--to-queue) or one subject (--to-subject)")
    f = replace(selector, statuses=(Status.SENT,)).for_action("replay")
    own = store is None
    ops = store or OperationsStore.from_url(settings.database_url)
    try:
        report = ReplayReport(
            replay_id=uuid.uuid4().hex,
            queue=to_queue or "",
            matched=0,
            after=after,
            dry_run=dry_run,
            selector=f.as_dict(),
            subject=to_subject,
        )
        report.matched, extent = ops.sent_extent(f, after=after)
        report.stream = _check(settings, to_queue, to_subject)
        if dry_run or extent is None:
            return report
        source = settings.source or default_source(ops.engine.url)
        publisher = _publisher(settings, to_queue, to_subject, report.replay_id)
        try:
            _run(ops, f, extent, publisher, report, source, rate, stop, on_window)
        finally:
            publisher.close()
            _record(ops, actor, f, report, source)
        return report
    finally:
        if own:
            ops.engine.dispose()


def _check(settings: Settings, to_queue: str | None, to_subject: str | None) -> str | None:
    """Refuse a destination that does not exist before anything is sent; the stream that
    captures ``to_subject`` (None for a queue)."""
    url, timeout = settings.events_connection_url, settings.confirm_timeout_seconds
    if to_queue is not None:
        check_queue(url, settings.exchange, to_queue, timeout=timeout)
        return None
    assert to_subject is not None
    if not settings.events_on_nats:
        raise ReplayRefused(
            "--to-subject: a replay to a subject needs RELAY_EVENTS_URL on NATS JetStream "
            "(nats:// or tls://); use --to-queue on this broker; nothing was sent"
        )
    from relay.publishers.stream_replay import check_subject

    return check_subject(url, to_subject, timeout=timeout)


def _publisher(
    settings: Settings, to_queue: str | None, to_subject: str | None, replay_id: str
) -> Publisher:
    keys, timeout = settings.signing_keys, settings.confirm_timeout_seconds
    url, exchange = settings.events_connection_url, settings.exchange
    if to_subject is None:
        assert to_queue is not None
        return for_queue(
            url, exchange, to_queue, replay_id, confirm_timeout=timeout, signing_keys=keys
        )
    from relay.publishers.stream_replay import for_subject

    return for_subject(
        url, exchange, to_subject, replay_id, confirm_timeout=timeout, signing_keys=keys
    )


def _run(
    ops: OperationsStore,
    f: EventFilter,
    extent: tuple[int, int],
    publisher: Publisher,
    report: ReplayReport,
    source: str,
    rate: float | None,
    stop: threading.Event | None,
    on_window: Callable[[ReplayReport], None] | None,
) -> None:
    window = WINDOW if rate is None else max(1, min(WINDOW, int(rate / WINDOWS_PER_SECOND)))
    started = time.monotonic()
    counted = _counter(source)
    first, horizon = extent
    cursor = first - 1
    while cursor < horizon:
        upto = min(horizon, cursor + PAGE)
        page = ops.sent_events(f, after=cursor, horizon=upto, source=source)
        cursor = upto
        for start in range(0, len(page), window):
            if stop is not None and stop.is_set():
                report.error = "stopped (a stop was requested)"
                return
            chunk = page[start : start + window]
            confirmed = _publish(publisher, chunk, report)
            report.sent += confirmed
            counted(confirmed)
            if report.error is not None:
                return
            if on_window is not None:
                on_window(report)
            if rate is not None:
                _pace(started, report.sent, rate, stop)


def _publish(publisher: Publisher, chunk: list[ClaimedEvent], report: ReplayReport) -> int:
    """Publish one window up to its first row no message can carry (``ClaimedEvent.defect``:
    a row edited by hand since it was sent), which stops the replay there, with why; the
    confirmed prefix moves ``last_id``. What the broker did not confirm stops it too
    (``report.error``)."""
    cut = next((i for i, e in enumerate(chunk) if e.defect is not None), len(chunk))
    n = _publish_confirmed(publisher, chunk[:cut], report) if cut else 0
    if report.error is None and cut < len(chunk):
        bad = chunk[cut]
        report.error = (
            f"event {bad.id} cannot be replayed: {bad.defect} (a replay after {bad.id} skips it)"
        )
    return n


def _publish_confirmed(
    publisher: Publisher, chunk: list[ClaimedEvent], report: ReplayReport
) -> int:
    result = publisher.publish(chunk)
    acks = getattr(publisher, "acks", None)  # a JetStream publisher's: where they were stored
    if acks is not None and acks.first is not None:
        report.stream = acks.stream or report.stream
        report.first_sequence = report.first_sequence or acks.first
        report.last_sequence = max(report.last_sequence or 0, acks.last)
    confirmed = {e.id for e in result.confirmed}
    n = 0
    for event in chunk:
        if event.id not in confirmed:
            break
        n += 1
        report.last_id = event.id
    if n < len(chunk):
        refused = {e.id: why for e, why in [*result.rejected, *result.unsendable]}
        first = chunk[n].id
        why = refused.get(first) or (str(result.error) if result.error else "not confirmed")
        report.error = f"event {first} was not confirmed: {why}"
    return n


def _pace(started: float, sent: int, rate: float, stop: threading.Event | None) -> None:
    """Sleep until ``sent`` events are due at ``rate`` a second (woken early by ``stop``)."""
    delay = started + sent / rate - time.monotonic()
    if delay <= 0:
        return
    if stop is not None:
        stop.wait(delay)
    else:
        time.sleep(delay)


def _record(
    ops: OperationsStore,
    actor: Actor | None,
    f: EventFilter,
    report: ReplayReport,
    source: str,
) -> None:
    """The audit line and the audit row of a replay that was run."""
    who = actor or Actor(getpass.getuser(), "operator", "python")
    extra: dict[str, Any] = {"replay_id": report.replay_id}
    if report.subject is None:
        extra["to_queue"] = report.queue
    else:
        extra |= {"to_subject": report.subject, "stream": report.stream}
    extra["source"] = source
    if report.after is not None:
        extra["after"] = report.after
    if report.last_id is not None:
        extra["last_id"] = report.last_id
    if report.error is not None:
        extra["stopped"] = report.error
    audit_log.info(
        "replay %s by %s via %s to %s: %d of %d sent events, selector %s",
        report.replay_id,
        who.name,
        who.via,
        report.destination,
        report.sent,
        report.matched,
        {**f.as_dict(), **extra},
    )
    try:
        ops.audit(who, "replay", f, Changed(report.matched, report.sent), extra)
    except StoreError as exc:  # the replay happened; its log line above still says so
        log.error("could not record replay %s in the audit table: %s", report.replay_id, exc)


_COUNTER: Any = None
_COUNTER_LOCK = threading.Lock()


def _counter(source: str) -> Callable[[int], None]:
    """``relay_events_replayed_total{source}`` of this process (prometheus_client's default
    registry, served by whatever serves the process's metrics)."""
    global _COUNTER
    with _COUNTER_LOCK:
        if _COUNTER is None:
            from prometheus_client import Counter

            _COUNTER = Counter(
                "relay_events_replayed",
                "Sent events published again to one queue by a replay (confirmed).",
                ["source"],
            )
    child = _COUNTER.labels(source=source)
    return lambda n: child.inc(n) if n else None


__all__ = ["PAGE", "WINDOW", "ReplayReport", "replay", "replay_selected"]
