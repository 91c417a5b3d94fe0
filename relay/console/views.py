"""What the pages and the API share: reading a filter from a request, masking fields, turning
rows into JSON values, running an action through the store's verbs, and the status a failed
request answers with."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from relay.config import Settings
from relay.exceptions import (
    BrokerUnavailable,
    DatabaseUnavailable,
    ReplayRefused,
    SelectorError,
    StoreError,
)
from relay.records import Status
from relay.store.operations.actions import Actor, Changed
from relay.store.operations.filters import EventFilter, parse_duration, parse_when
from relay.store.operations.pausing import KINDS, PauseStore
from relay.store.operations.store import OperationsStore

if TYPE_CHECKING:
    from relay.replays.replayer import ReplayReport

T = TypeVar("T")

#: What replaces a masked field's value.
MASK = "***"
#: What stands for the stored text of a field that cannot be read as JSON while fields are
#: masked: no field can be found in it to mask.
WITHHELD = "(withheld: RELAY_CONSOLE_REDACT is set and this text cannot be read to mask it)"
#: Most rows one page or API call returns.
MAX_LIMIT = 1000
ACTIONS = ("retry", "purge", "replay")
#: The largest id (a signed 64-bit key on every database).
MAX_ID = 2**63 - 1
#: Most ids one request may name, and the longest text a filter field may hold.
MAX_IDS, MAX_TEXT = 1000, 1000


class BadRequest(ValueError):
    """A request the console refuses, with the reason (400)."""


#: The failures a request answers with a status, matched in this order (an outage is a kind of
#: ``StoreError``): the caller's mistake, an outage, another fault of the database. Anything
#: else is a bug and propagates.
_STATUSES: tuple[tuple[tuple[type[Exception], ...], int], ...] = (
    ((BadRequest, SelectorError, ReplayRefused), 400),
    ((DatabaseUnavailable, BrokerUnavailable), 503),
    ((StoreError,), 500),
)
#: Every failure :func:`failure_status` answers for, to catch around a request's handler.
ANSWERED: tuple[type[Exception], ...] = tuple(kind for kinds, _ in _STATUSES for kind in kinds)


def failure_status(exc: Exception) -> int:
    """The HTTP status of a request that raised ``exc``, one of :data:`ANSWERED`."""
    return next(status for kinds, status in _STATUSES if isinstance(exc, kinds))


def _text(values: Mapping[str, Any], name: str) -> str | None:
    value = values.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string")
    if len(value) > MAX_TEXT:
        raise BadRequest(f"{name} is longer than {MAX_TEXT} characters")
    if not _storable(value):
        raise BadRequest(f"{name} holds a control character or is not valid UTF-8")
    return value.strip() or None


def _storable(text: str) -> bool:
    """Whether every database takes ``text`` as a parameter: valid UTF-8 (no lone surrogate,
    which a JSON body may carry) and no control character (PostgreSQL refuses NUL)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return all(c.isprintable() or c in "\t" for c in text)


def bounded_id(raw: Any, name: str) -> int:
    """``raw`` as an id: an integer 0..2**63-1 (a larger one no database could hold)."""
    if isinstance(raw, bool):
        raise BadRequest(f"{name} must be an integer")
    try:
        value = int(raw)
    except (TypeError, ValueError, OverflowError):
        raise BadRequest(f"{name} must be an integer") from None
    if not 0 <= value <= MAX_ID:
        raise BadRequest(f"{name} must be 0..{MAX_ID}")
    return value


def _statuses(raw: Any) -> tuple[Status, ...]:
    names: Iterable[Any]
    if raw is None or raw == "":
        return ()
    if isinstance(raw, str):
        names = [n for n in raw.split(",") if n.strip()]
    elif isinstance(raw, list):
        names = raw
    else:
        raise BadRequest("status must be a name or a list of names")
    try:
        return tuple(dict.fromkeys(Status(str(n).strip()) for n in names))
    except ValueError:
        raise BadRequest(f"status must be among {', '.join(s.value for s in Status)}") from None


def _parsed(values: Mapping[str, Any], name: str, parse: Callable[[str], T]) -> T | None:
    """Field ``name`` read by ``parse`` (the CLI's own parser of that kind of value), None when
    it is absent; a value it refuses is a bad request naming the field."""
    text = _text(values, name)
    if text is None:
        return None
    try:
        return parse(text)
    except argparse.ArgumentTypeError as exc:
        raise BadRequest(f"{name}: {exc}") from None


def _ids(raw: Any) -> tuple[int, ...]:
    if raw is None or raw == "":
        return ()
    items = raw.split(",", MAX_IDS) if isinstance(raw, str) else raw
    if not isinstance(items, list):
        raise BadRequest("ids must be a list of integers")
    if len(items) > MAX_IDS:
        raise BadRequest(f"ids may name at most {MAX_IDS} events")
    if isinstance(raw, str):
        # "1, 2," from a form: blanks between commas are no id.
        items = [i for i in items if i.strip()]
    return tuple(bounded_id(i, "ids") for i in items)


def read_filter(values: Mapping[str, Any]) -> EventFilter:
    """An ``EventFilter`` from query parameters, a form or a JSON body: ``status``,
    ``event_type``, ``key``, ``error``, ``since``, ``until``, ``ids``, ``all``."""
    everything = values.get("all")
    return EventFilter(
        statuses=_statuses(values.get("status")),
        ids=_ids(values.get("ids")),
        event_type=_text(values, "event_type"),
        key=_text(values, "key"),
        error=_text(values, "error"),
        since=_parsed(values, "since", parse_when),
        until=_parsed(values, "until", parse_when),
        all=everything is True or everything in ("true", "1", "on"),
    )


def read_page(values: Mapping[str, Any], default: int = 50) -> tuple[int, int | None]:
    """``limit`` (1..1000) and ``after`` (an id) of a keyset page."""
    raw = values.get("limit") or default
    if isinstance(raw, str) and len(raw) > 20:
        raise BadRequest(f"limit must be 1..{MAX_LIMIT}")
    try:
        limit = int(raw)
    except (TypeError, ValueError, OverflowError):
        raise BadRequest("limit must be an integer") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"limit must be 1..{MAX_LIMIT}")
    after_raw = values.get("after")
    after = bounded_id(after_raw, "after") if after_raw not in (None, "") else None
    return limit, after


def act(
    store: OperationsStore,
    action: str,
    f: EventFilter,
    *,
    dry_run: bool,
    actor: Actor | None,
    values: Mapping[str, Any] | None = None,
) -> Changed:
    """Retry failed rows, or purge failed or sent rows, through the store's verbs; the
    status defaults to failed. A retry reads ``expires_in`` (a duration: a new deadline) or
    ``no_expiry`` from ``values``: without either, a selection holding rows past their
    deadline is refused (400), never silently retried to expire again."""
    statuses = f.statuses or (Status.FAILED,)
    if action == "retry":
        if statuses != (Status.FAILED,):
            raise BadRequest("only failed events can be retried")
        values = values or {}
        expires_in = _parsed(values, "expires_in", parse_duration)
        no_expiry = values.get("no_expiry") in (True, "true", "1", "on")
        return store.retry_failed(
            f, dry_run=dry_run, actor=actor, expires_in=expires_in, no_expiry=no_expiry
        )
    if action == "purge":
        if statuses == (Status.FAILED,):
            return store.purge_failed(f, dry_run=dry_run, actor=actor)
        if statuses == (Status.SENT,):
            return store.purge_sent_events(f, dry_run=dry_run, actor=actor)
        raise BadRequest("purge takes the failed or the sent events, one status at a time")
    raise BadRequest(f"unknown action {action!r}")


def replay(
    settings: Settings,
    store: OperationsStore,
    f: EventFilter,
    values: Mapping[str, Any],
    *,
    dry_run: bool,
    actor: Actor,
) -> ReplayReport:
    """Replay the sent rows ``f`` selects to the queue ``values`` names (``to_queue``), or on
    NATS JetStream to its subject (``to_subject``), from ``after`` and at ``rate`` if given
    (:func:`relay.replays.replayer.replay_selected`)."""
    from relay.replays.replayer import replay_selected as run

    queue, subject = _text(values, "to_queue"), _text(values, "to_subject")
    if queue is None and subject is None:
        raise BadRequest(
            "to_queue: a replay needs the name of an existing queue (on NATS JetStream, "
            "to_subject: a subject an existing stream captures)"
        )
    if queue is not None and subject is not None:
        raise BadRequest("a replay goes to one queue (to_queue) or one subject (to_subject)")
    if f.statuses not in ((), (Status.SENT,)):
        raise BadRequest("only sent events can be replayed")
    try:
        raw = values.get("after")
        after = int(raw) if raw not in (None, "") else None
    except (TypeError, ValueError):
        raise BadRequest("after must be an event id") from None
    try:
        raw = values.get("rate")
        rate = float(raw) if raw not in (None, "") else None
    except (TypeError, ValueError):
        raise BadRequest("rate must be a number of events a second") from None
    return run(
        settings,
        f,
        to_queue=queue,
        to_subject=subject,
        after=after,
        rate=rate,
        dry_run=dry_run,
        actor=actor,
        store=store,
    )


def masked(value: Any, fields: frozenset[str]) -> Any:
    """``value`` with every mapping entry whose name is in ``fields`` (any case) masked."""
    if not fields:
        return value
    if isinstance(value, Mapping):
        return {
            k: MASK if str(k).lower() in fields else masked(v, fields) for k, v in value.items()
        }
    if isinstance(value, list):
        return [masked(v, fields) for v in value]
    return value


def jsonable(row: Mapping[str, Any], fields: frozenset[str]) -> dict[str, Any]:
    """A row as JSON values: times in ISO 8601, payload and headers masked (the stored text
    of one that cannot be read as JSON, ``relay.store.operations.readable``, withheld)."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        if isinstance(value, datetime | date):
            value = value.isoformat()
        elif name in ("payload", "headers"):
            value = masked(value, fields)
        elif name == "unreadable" and fields:
            value = {k: {**v, "text": WITHHELD} for k, v in value.items()}
        out[name] = value
    return out


__all__ = [
    "ANSWERED",
    "MASK",
    "WITHHELD",
    "BadRequest",
    "act",
    "bounded_id",
    "failure_status",
    "jsonable",
    "masked",
    "pause_action",
    "read_filter",
    "read_page",
]


def pause_action(
    pauses: PauseStore, values: Mapping[str, Any], actor: Actor
) -> tuple[str, str, str, bool]:
    """Pause or resume from a form or a JSON body (``action``, ``kind``, ``value``,
    ``reason``), audited as ``actor``: the verb, kind, value, and whether it changed anything."""
    verb, kind, value = (str(values.get(k) or "") for k in ("action", "kind", "value"))
    reason = str(values.get("reason") or "") or None
    if verb not in ("pause", "resume"):
        raise BadRequest(f"unknown action {verb!r} (pause or resume)")
    if kind not in KINDS:
        raise BadRequest(f"kind must be one of {', '.join(KINDS)}")
    if not value or len(value) > 255:
        raise BadRequest("value must be 1-255 characters")
    if verb == "pause":
        return verb, kind, value, pauses.pause(kind, value, reason=reason, by=actor)
    return verb, kind, value, pauses.resume(kind, value, by=actor)
