"""The producer's pure core, shared by every adapter (sync SQLAlchemy, asyncio, Django):
validation, the row's values and the statement that writes it. No I/O here.

Every check runs before an adapter executes anything, so a bad event raises
:class:`~relay.exceptions.EventError` (naming the field) inside the caller's transaction and
nothing is written.

A deadline (``expires_at``, an aware time; or ``expires_in``, a duration after the event is
due: the database's now plus any ``delay``), else ``RELAY_EXPIRE_AFTER``'s default for the event
type (:mod:`relay.config.expiry`), is written into ``outbox.expires_at``; the relay
dead-letters a row claimed past it without publishing it.

A keyed row carries no number: since migration 0012 the database's trigger takes the key's next
number in the writer's transaction (see docs/ordering.md), the same for every writer, in any
language. The :class:`relay.Producer` (``relay.produce.enqueue``) holds the payload cap, the
default deadlines and the wake-up and builds its rows here; an adapter only executes
:meth:`Row.statement` with :attr:`Row.values` in its caller's transaction and arms the
producer's wake-up for after the commit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import Insert

from relay.config import env, expiry
from relay.config.expiry import ExpireAfter
from relay.exceptions import EventError
from relay.observe import tracing
from relay.publishers.message import RESERVED_HEADERS, encode_body
from relay.store import dialects

MAX_NAME_BYTES = 255  # an AMQP routing key is a shortstr: at most 255 bytes
DEFAULT_MAX_PAYLOAD_BYTES = env.DEFAULT_MAX_PAYLOAD_BYTES


@dataclass(frozen=True, slots=True)
class Row:
    """One validated event: the values to bind and whether it is delayed."""

    values: dict[str, Any]
    delayed: bool
    #: How its deadline is bound: ``"at"`` (``expires_at``), ``"in"`` (``expires_seconds``
    #: after the database's now), None (no deadline).
    expiry: str | None = None

    def statement(self, dialect_name: str) -> Insert:
        """The INSERT that writes this row on dialect ``dialect_name`` (keyed rows are
        numbered by the database's trigger)."""
        return dialects.for_name(dialect_name).insert_event(
            delayed=self.delayed, expiry=self.expiry
        )


class Limits(Protocol):
    """What a row is checked against (a :class:`relay.Producer` holds them)."""

    #: The largest payload, as JSON.
    max_payload_bytes: int
    #: The default deadline per event type (``RELAY_EXPIRE_AFTER``); None: no default.
    expire_after: ExpireAfter | None


def row(
    limits: Limits,
    event_type: str,
    payload: Any,
    headers: dict[str, Any] | None,
    ordering_key: str | None,
    delay: timedelta | float | None,
    deadline: datetime | float | None,
) -> Row:
    """The row of one event whose ``headers`` and ``deadline`` are checked already; the other
    fields are checked here, the payload against the cap of ``limits``, and a missing deadline
    is its default for the type."""
    values: dict[str, Any] = {
        "event_type": check_name("event_type", event_type),
        "payload": check_payload(payload, limits.max_payload_bytes),
        "headers": tracing.capture(headers),
        "ordering_key": None if ordering_key is None else check_name("ordering_key", ordering_key),
    }
    seconds = check_delay(delay)
    if seconds:
        values["delay_seconds"] = seconds
    if deadline is None and limits.expire_after is not None:
        deadline = limits.expire_after.seconds_for(values["event_type"])
    kind = None
    if isinstance(deadline, datetime):
        kind, values["expires_at"] = "at", deadline
    elif deadline is not None:
        # Counted from when the event is due, so a delayed event is not born expired.
        kind, values["expires_seconds"] = "in", seconds + deadline
    return Row(values, delayed=bool(seconds), expiry=kind)


def check_payload(payload: Any, max_payload_bytes: int) -> Any:
    """``payload`` if it encodes as JSON within ``max_payload_bytes``."""
    try:
        size = len(encode_body(payload))
    except (TypeError, ValueError) as exc:
        raise EventError("payload", f"is not JSON-serializable: {exc}") from None
    if size > max_payload_bytes:
        raise EventError("payload", f"is {size} bytes as JSON, over the cap of {max_payload_bytes}")
    return payload


def check_name(field: str, value: object) -> str:
    """``value`` if it is a non-empty str that fits an AMQP shortstr and carries no NUL."""
    if not isinstance(value, str):
        raise EventError(field, f"must be a str, not {type(value).__name__}")
    if not value:
        raise EventError(field, "must not be empty")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise EventError(field, f"is {size} bytes in UTF-8, over the limit of {MAX_NAME_BYTES}")
    if "\x00" in value:
        raise EventError(field, "must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise EventError(field, "is not valid Unicode (lone surrogate)") from None
    return value


def check_headers(headers: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A copy of ``headers`` if every key may travel as an AMQP header and the values as JSON."""
    if headers is None:
        return None
    if not isinstance(headers, Mapping):
        raise EventError("headers", f"must be a mapping, not {type(headers).__name__}")
    for key in headers:
        if not isinstance(key, str) or not key:
            raise EventError("headers", f"keys must be non-empty str, got {key!r}")
        if key in RESERVED_HEADERS:
            raise EventError("headers", f"key {key!r} is reserved for the relay")
        if len(key.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            # An AMQP field-table key is a shortstr: the broker could never carry it.
            raise EventError("headers", f"key {key[:20]!r}... is over {MAX_NAME_BYTES} bytes")
    try:
        json.dumps(dict(headers), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise EventError("headers", f"are not JSON-serializable: {exc}") from None
    return dict(headers)


def check_delay(delay: timedelta | float | None) -> float:
    """``delay`` in seconds (0 for none), refused unless finite and non-negative."""
    if delay is None:
        return 0.0
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        seconds = float(delay)
    else:
        raise EventError("delay", f"must be a timedelta or seconds, not {type(delay).__name__}")
    if not math.isfinite(seconds) or seconds < 0:
        raise EventError("delay", f"must be a finite, non-negative duration, got {delay!r}")
    return seconds


def check_expiry(
    expires_at: datetime | None, expires_in: timedelta | float | None
) -> datetime | float | None:
    """The event's deadline: ``expires_at`` (an aware datetime), or ``expires_in`` in seconds
    (a positive, finite duration), or None; refused when both are given."""
    if expires_at is not None and expires_in is not None:
        raise EventError("expires_at", "and expires_in are exclusive: give one of the two")
    if expires_at is not None:
        if not isinstance(expires_at, datetime):
            kind = type(expires_at).__name__
            raise EventError("expires_at", f"must be a datetime, not {kind}")
        if expires_at.tzinfo is None or expires_at.utcoffset() is None:
            raise EventError(
                "expires_at",
                f"must be timezone-aware, got the naive {expires_at.isoformat()} (a naive time "
                "means a different moment on each host: give tzinfo, e.g. UTC)",
            )
        return expires_at
    if expires_in is None:
        return None
    if isinstance(expires_in, timedelta):
        seconds = expires_in.total_seconds()
    elif isinstance(expires_in, int | float) and not isinstance(expires_in, bool):
        seconds = float(expires_in)
    else:
        kind = type(expires_in).__name__
        raise EventError("expires_in", f"must be a timedelta or seconds, not {kind}")
    if not math.isfinite(seconds) or not 0 < seconds <= expiry.MAX_DURATION_SECONDS:
        raise EventError(
            "expires_in", f"must be a positive duration of at most a century, got {expires_in!r}"
        )
    return seconds


def sorted_keys(ordering_keys: Iterable[str]) -> list[str]:
    """The distinct keys of ``ordering_keys``, each checked, in the order ``lock_keys`` locks."""
    if isinstance(ordering_keys, str):
        raise EventError("ordering_keys", "must be an iterable of keys, not one str")
    return sorted({check_name("ordering_key", key) for key in ordering_keys})
