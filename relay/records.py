"""Value objects shared by every layer; no I/O, no third-party imports."""

from __future__ import annotations

import enum
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from relay.exceptions import PublishError


class Status(enum.StrEnum):
    """Where an outbox row is in its life (docs/guarantees.md)."""

    #: Waiting to be claimed, once ``next_retry_at`` has passed.
    PENDING = "pending"
    #: Claimed by ``locked_by`` until ``locked_until``; reclaimable once that has passed.
    PROCESSING = "processing"
    #: The broker confirmed the message. Terminal until retention deletes it.
    SENT = "sent"
    #: Dead letter: the last attempt failed. Held until an operator retries or purges it.
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ClaimedEvent:
    """One row a worker holds a lease on, with everything needed to publish it."""

    id: int
    event_type: str
    payload: Any
    headers: Mapping[str, Any] | None
    ordering_key: str | None
    #: The attempt this claim is: 1 for the first. Part of the completion fence.
    attempt: int
    created_at: datetime
    #: The row's number within its ordering key; None for an unordered row.
    seq: int | None = None
    #: The message id unique across outboxes (``outbox.event_id``); None on a row sent before
    #: migration 0010, whose message carries the outbox id as it did then.
    event_id: str | None = None
    #: The row's ``expires_at`` had passed by the database's clock when it was claimed: it is
    #: dead-lettered on this attempt without being published.
    expired: bool = False
    #: That deadline, read only for an expired row (None otherwise): an aware datetime, or
    #: what the claim read when it is no time Python holds.
    expires_at: Any = None
    #: The outbox the row came from, as the CloudEvents ``source`` (``RELAY_SOURCE``).
    source: str | None = None
    #: Why this row cannot become a message (:meth:`from_claims` finds it: ``headers_fault``,
    #: ``time_fault``): it is dead-lettered on this attempt without being published. None for
    #: every row that can be sent.
    defect: str | None = None

    @classmethod
    def from_claims(
        cls,
        rows: Sequence[Sequence[Any]],
        loads_many: Callable[[list[Any]], list[Any]],
        source: str | None = None,
    ) -> list[ClaimedEvent]:
        """Build from a claim's rows, tuples in this class's field order (the dialect's
        ``claim_columns``) with payload and headers as JSON text, all decoded by one call of
        ``loads_many``: no mapping is built per row on the hot path. A batch holding a text that
        cannot be decoded is decoded row by row instead, and each such row carries its
        ``defect`` (never an exception: a row's fault is the row's, docs/guarantees.md)."""
        texts = [text for row in rows for text in (row[2], row[3])]
        try:
            values: list[Any] = loads_many(texts)
            faults: list[str | None] | None = None
        except Exception:  # whatever a text holds, the texts are decoded one by one below
            decoded = decode_each(texts, loads_many)
            values = [value for value, _ in decoded]
            faults = [why for _, why in decoded]
        events = []
        for i, (
            id_,
            event_type,
            _,
            _,
            key,
            attempt,
            created_at,
            seq,
            eid,
            expired,
            deadline,
        ) in enumerate(rows):
            headers = values[2 * i + 1]
            defect = None
            if faults is not None and (faults[2 * i] or faults[2 * i + 1]):
                field_, why = (
                    ("payload", faults[2 * i]) if faults[2 * i] else ("headers", faults[2 * i + 1])
                )
                defect = f"{field_}: {why}"
            elif headers is not None and (type(headers) is not dict or TASK_HEADER in headers):
                defect = headers_fault(headers)
            if not isinstance(created_at, datetime):
                defect = defect or time_fault(created_at)
                created_at = UNREADABLE_TIME
            if defect is not None:
                headers = (
                    headers if isinstance(headers, dict) and TASK_HEADER not in headers else None
                )
            events.append(
                cls(
                    id_,
                    event_type,
                    values[2 * i],
                    headers,
                    key,
                    attempt,
                    created_at,
                    seq,
                    eid,
                    bool(expired),
                    deadline,
                    source,
                    defect,
                )
            )
        return events


@dataclass(frozen=True, slots=True)
class Rescheduled:
    """A failed attempt with attempts left: back to pending after ``delay_seconds``."""

    event: ClaimedEvent
    delay_seconds: float
    error: str


@dataclass(frozen=True, slots=True)
class Buried:
    """A failed last attempt: the row becomes ``failed`` (dead letter)."""

    event: ClaimedEvent
    error: str


@dataclass(frozen=True, slots=True)
class Released:
    """Rows given back without spending their attempt, claimable after ``delay_seconds``."""

    events: list[ClaimedEvent]
    delay_seconds: float
    error: str


@dataclass(frozen=True, slots=True)
class Completed:
    """How many rows each outcome statement changed; ``lost`` rows were fenced out."""

    sent: int
    rescheduled: int
    buried: int
    lost: int
    released: int = 0


@dataclass(frozen=True, slots=True)
class StatusReport:
    """What ``relay status`` prints."""

    counts: Mapping[str, int]
    oldest_pending_age_seconds: float | None
    #: Rows in ``processing`` whose lease has expired: a crashed or stalled worker's.
    expired_leases: int
    #: Events deleted at send (``RELAY_DELETE_ON_SEND``) in the last day, as counted in
    #: ``outbox_sent_counts``: they have no row left to count under ``sent``.
    deleted_at_send: int = 0
    #: Ordering keys whose next row cannot be claimed (:class:`StalledKey`), counted up to a cap.
    stalled_keys: int = 0
    #: A few of them, with why and the fix.
    stalled_sample: tuple[StalledKey, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "counts": {s.value: int(self.counts.get(s.value, 0)) for s in Status},
            "oldest_pending_age_seconds": self.oldest_pending_age_seconds,
            "failed": int(self.counts.get(Status.FAILED.value, 0)),
            "expired_leases": self.expired_leases,
            "deleted_at_send": self.deleted_at_send,
            "stalled_keys": self.stalled_keys,
            "stalled_sample": [k.as_dict() for k in self.stalled_sample],
        }


@dataclass(slots=True)
class PublishResult:
    """What the broker said about each event of a batch."""

    #: The broker confirmed these: they may be marked sent.
    confirmed: list[ClaimedEvent] = field(default_factory=list)
    #: Refused (nack, unroutable, not encodable): the attempt failed, with the reason.
    rejected: list[tuple[ClaimedEvent, str]] = field(default_factory=list)
    #: Cannot become a message at all (the publisher could not build or encode it, a row's
    #: fault): dead-lettered at once with the reason, since no later attempt would do better.
    unsendable: list[tuple[ClaimedEvent, str]] = field(default_factory=list)
    #: The broker could not be reached: not the events' fault, their attempt is given back.
    unavailable: list[ClaimedEvent] = field(default_factory=list)
    #: Not published because an earlier row of their key failed in this batch: given back
    #: without spending an attempt, so that nothing overtakes the failed row.
    withheld: list[ClaimedEvent] = field(default_factory=list)
    #: Why the broker was unavailable (a :class:`~relay.exceptions.BrokerUnavailable`, as a rule).
    error: PublishError | None = None


# -- rows no message can carry ---------------------------------------------------------------
# Why a claimed row cannot become a message, in words an operator can act on; pure.
#
# The outbox is writable from any language, so a row can hold what the database accepts and no
# message can carry: a payload that is not JSON at all (SQLite keeps any text), an integer longer
# than Python reads (a 5,001-digit ``numeric`` in ``jsonb``), JSON nested deeper than the decoder
# goes, headers that are not an object, a Celery task header not written by
# ``relay.celery.send_task``. Such a fault is the row's (docs/guarantees.md): the row alone is
# dead-lettered on its first attempt with one of these reasons, and the rest of its batch goes on.
#
# The claim decodes a batch's texts in one call of the C scanner (``ClaimedEvent.from_claims``);
# only when that fails are the texts decoded one by one here, so a good batch pays nothing.


#: The row header that makes a row a Celery task (``relay.celery.send_task``); one name for
#: the claim's checks and the message builder (``relay.publishers.message.TASK_HEADER``).
TASK_HEADER = "x-relay-task"
#: What a task header written by ``relay.celery.send_task`` always holds.
TASK_KEYS = (("headers", dict), ("routing_key", str), ("exchange", str))
#: Fields of a task header that may be absent or null, with the type they have when present.
TASK_OPTIONAL = (("properties", dict), ("declare", dict))

_DIGITS = re.compile(r"\d+")
#: Why the JSON of a field could not be read; each a class of fault the operator can fix.
_JSON_KIND = {
    "list": "an array",
    "str": "a string",
    "int": "a number",
    "float": "a number",
    "bool": "a boolean",
}


def decode_each(
    texts: Sequence[str | None], loads_many: Callable[[list[Any]], list[Any]]
) -> list[tuple[Any, str | None]]:
    """Decode each text alone: ``(value, None)``, or ``(None, why)`` for one that cannot be
    read. ``why`` names the problem, not the field (the caller knows which it was)."""
    out: list[tuple[Any, str | None]] = []
    for text in texts:
        if text is None:
            out.append((None, None))
            continue
        if isinstance(text, int | float) and not isinstance(text, bool):
            # SQLite keeps JSON text that reads as a number as that number (the column's
            # numeric affinity): it is the JSON value, unless it overflowed a double.
            if isinstance(text, float) and not math.isfinite(text):
                out.append((None, f"a number beyond a double ({text}): SQLite stored it so"))
            else:
                out.append((text, None))
            continue
        try:
            out.append((loads_many([text])[0], None))
        except RecursionError:
            out.append(
                (None, "JSON nested deeper than the relay decodes (Python's recursion limit)")
            )
        except ValueError as exc:
            out.append((None, _unreadable(text, exc)))
        except Exception as exc:  # anything a row holds is the row's fault, never the cycle's
            out.append((None, f"cannot be decoded: {type(exc).__name__}: {exc}"))
    return out


def _unreadable(text: str | bytes, exc: ValueError) -> str:
    limit = sys.get_int_max_str_digits()
    if limit and "integer string conversion" in str(exc):
        longest = max((len(m) for m in _DIGITS.findall(str(text))), default=0)
        return (
            f"an integer of {longest:,} digits, more than the {limit:,} Python converts "
            "(store it as a string)"
        )
    return f"not JSON: {exc}"


#: A claimed row's ``created_at`` when the stored one is no time Python holds: such a row is
#: dead-lettered unpublished (``time_fault``), so no message ever carries this.
UNREADABLE_TIME = datetime(1970, 1, 1, tzinfo=UTC)


def time_fault(value: Any) -> str:
    """Why a row's ``created_at``, as the claim read it (``relay.store.timestamps.ReadTimestamp``),
    is no time a message can carry."""
    fix = "write an ISO 8601 UTC time, or leave it to the column's default"
    if value is None:
        return f"created_at: outside the years 1 to 9999 (infinity or -infinity?): {fix}"
    shown = repr(value)
    shown = shown if len(shown) <= 60 else f"{shown[:57]}..."
    name = type(value).__name__
    kind = "" if isinstance(value, str) else f" ({_JSON_KIND.get(name, name)})"
    return f"created_at: {shown}{kind} is not a time: {fix}"


def headers_fault(headers: Any) -> str | None:
    """Why decoded ``headers`` cannot be a message's headers (None: they can)."""
    if headers is None:
        return None
    if not isinstance(headers, Mapping):
        kind = _JSON_KIND.get(type(headers).__name__, type(headers).__name__)
        return f"headers: {kind}, not a JSON object (null or an object of header values)"
    task = headers.get(TASK_HEADER)
    if task is None and TASK_HEADER not in headers:
        return None
    return _task_fault(task)


def _task_fault(task: Any) -> str | None:
    written = "write tasks with relay.celery.send_task"
    if not isinstance(task, Mapping):
        return f"headers: {TASK_HEADER} is not an object ({written})"
    for key, kind in TASK_KEYS:
        if not isinstance(task.get(key), kind):
            have = "missing" if key not in task else f"a {type(task[key]).__name__}"
            return f"headers: {TASK_HEADER}.{key} is {have}, not a {kind.__name__} ({written})"
    for key, kind in TASK_OPTIONAL:
        value = task.get(key)
        if value is not None and not isinstance(value, kind):
            return (
                f"headers: {TASK_HEADER}.{key} is a {type(value).__name__}, "
                f"not a {kind.__name__} ({written})"
            )
    expires = task["headers"].get("expires")
    if expires is None:
        return None
    try:
        datetime.fromisoformat(expires)
    except (TypeError, ValueError):
        return f"headers: {TASK_HEADER}.headers.expires {expires!r} is not an ISO 8601 time"
    return None


class Stall(enum.StrEnum):
    """Why an ordering key's next row cannot be claimed (docs/ordering.md, "A stalled key")."""

    #: Its head (the row numbered progress + 1) is failed: held until an operator retries or
    #: purges it, by design.
    FAILED = "failed"
    #: No row has the head's number while the key has higher ones: they wait for a number that
    #: never comes (a row numbered by hand, or deleted).
    MISSING = "missing"
    #: Its head is sent but the key's progress was not moved past it (edited by hand).
    SENT = "sent"


@dataclass(frozen=True, slots=True)
class StalledKey:
    """An ordering key whose rows wait behind a head the claim will never take, with why and
    the fix in an operator's words (built by :func:`relay.ordering.stalled_key`)."""

    key: str
    stall: Stall
    #: The number the claim waits for: the key's last sent number + 1.
    head_seq: int
    #: The head's id; None when no row has its number.
    head_id: int | None
    #: When the head is missing: the key's lowest number above it, where its rows resume.
    resumes_at: int | None
    why: str
    fix: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "stall": self.stall.value,
            "head_seq": self.head_seq,
            "head_id": self.head_id,
            "resumes_at": self.resumes_at,
            "why": self.why,
            "fix": self.fix,
        }
