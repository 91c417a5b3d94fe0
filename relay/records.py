"""Value objects shared by every layer; no I/O, no third-party imports."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
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
    #: The outbox the row came from, as the CloudEvents ``source`` (``RELAY_SOURCE``).
    source: str | None = None

    @classmethod
    def from_claims(
        cls,
        rows: Sequence[Sequence[Any]],
        loads_many: Callable[[list[Any]], list[Any]],
        source: str | None = None,
    ) -> list[ClaimedEvent]:
        """Build from a claim's rows, tuples in this class's field order (the dialect's
        ``claim_columns``) with payload and headers as JSON text, all decoded by one call of
        ``loads_many``: no mapping is built per row on the hot path."""
        values = loads_many([text for row in rows for text in (row[2], row[3])])
        return [
            cls(
                id_,
                event_type,
                values[2 * i],
                values[2 * i + 1],
                key,
                attempt,
                created_at,
                seq,
                eid,
                source,
            )
            for i, (id_, event_type, _, _, key, attempt, created_at, seq, eid) in enumerate(rows)
        ]


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

    def as_dict(self) -> dict[str, Any]:
        return {
            "counts": {s.value: int(self.counts.get(s.value, 0)) for s in Status},
            "oldest_pending_age_seconds": self.oldest_pending_age_seconds,
            "failed": int(self.counts.get(Status.FAILED.value, 0)),
            "expired_leases": self.expired_leases,
            "deleted_at_send": self.deleted_at_send,
        }


@dataclass(slots=True)
class PublishResult:
    """What the broker said about each event of a batch."""

    #: The broker confirmed these: they may be marked sent.
    confirmed: list[ClaimedEvent] = field(default_factory=list)
    #: Refused (nack, unroutable, not encodable): the attempt failed, with the reason.
    rejected: list[tuple[ClaimedEvent, str]] = field(default_factory=list)
    #: The broker could not be reached: not the events' fault, their attempt is given back.
    unavailable: list[ClaimedEvent] = field(default_factory=list)
    #: Not published because an earlier row of their key failed in this batch: given back
    #: without spending an attempt, so that nothing overtakes the failed row.
    withheld: list[ClaimedEvent] = field(default_factory=list)
    #: Why the broker was unavailable (a :class:`~relay.exceptions.BrokerUnavailable`, as a rule).
    error: PublishError | None = None
