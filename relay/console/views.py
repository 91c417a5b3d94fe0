"""What the pages and the API share: reading a filter from a request, masking fields, turning
rows into JSON values, and running an action through the store's verbs."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from relay.config import Settings
from relay.records import Status
from relay.store.filters import EventFilter, parse_when
from relay.store.operations import Actor, Changed, OperationsStore

if TYPE_CHECKING:
    from relay.dispatch.replayer import ReplayReport

#: What replaces a masked field's value.
MASK = "***"
#: Most rows one page or API call returns.
MAX_LIMIT = 1000
ACTIONS = ("retry", "purge", "replay")


class BadRequest(ValueError):
    """A request the console refuses, with the reason (400)."""


def _text(values: Mapping[str, Any], name: str) -> str | None:
    value = values.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string")
    return value.strip() or None


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


def _when(values: Mapping[str, Any], name: str) -> Any:
    text = _text(values, name)
    if text is None:
        return None
    try:
        return parse_when(text)
    except argparse.ArgumentTypeError as exc:
        raise BadRequest(f"{name}: {exc}") from None


def _ids(raw: Any) -> tuple[int, ...]:
    if raw is None or raw == "":
        return ()
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list):
        raise BadRequest("ids must be a list of integers")
    try:
        return tuple(int(i) for i in items if not isinstance(i, bool))
    except (TypeError, ValueError):
        raise BadRequest("ids must be a list of integers") from None


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
        since=_when(values, "since"),
        until=_when(values, "until"),
        all=everything is True or everything in ("true", "1", "on"),
    )


def read_page(values: Mapping[str, Any], default: int = 50) -> tuple[int, int | None]:
    """``limit`` (1..1000) and ``after`` (an id) of a keyset page."""
    try:
        limit = int(values.get("limit") or default)
        after_raw = values.get("after")
        after = int(after_raw) if after_raw not in (None, "") else None
    except (TypeError, ValueError):
        raise BadRequest("limit and after must be integers") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"limit must be 1..{MAX_LIMIT}")
    return limit, after


def act(
    store: OperationsStore, action: str, f: EventFilter, *, dry_run: bool, actor: Actor | None
) -> Changed:
    """Retry failed rows, or purge failed or sent rows, through the store's verbs; the
    status defaults to failed."""
    statuses = f.statuses or (Status.FAILED,)
    if action == "retry":
        if statuses != (Status.FAILED,):
            raise BadRequest("only failed events can be retried")
        return store.retry_failed(f, dry_run=dry_run, actor=actor)
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
    """Replay the sent rows ``f`` selects to the queue ``values`` names (``to_queue``), from
    ``after`` and at ``rate`` if given (:func:`relay.dispatch.replayer.replay_selected`)."""
    from relay.dispatch.replayer import replay_selected as run

    queue = _text(values, "to_queue")
    if queue is None:
        raise BadRequest("to_queue: a replay needs the name of an existing queue")
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
    """A row as JSON values: times in ISO 8601, payload and headers masked."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        if isinstance(value, datetime | date):
            value = value.isoformat()
        elif name in ("payload", "headers"):
            value = masked(value, fields)
        out[name] = value
    return out


__all__ = ["MASK", "BadRequest", "act", "jsonable", "masked", "read_filter", "read_page"]
