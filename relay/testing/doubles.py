"""Test doubles shipped with the package: an in-memory publisher that records and can fail,
and an in-memory store that leases and fences as the database does (re-exported by
``relay.testing``, where applications import them)."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from relay.exceptions import BrokerUnavailable, EventUnsendable
from relay.ordering import RunGuard
from relay.publishers import message
from relay.publishers.message import OutgoingMessage
from relay.records import (
    Buried,
    ClaimedEvent,
    Completed,
    PublishResult,
    Released,
    Rescheduled,
    Status,
    headers_fault,
)
from relay.store.dispatch_path.protocol import Store


@dataclass
class InMemoryPublisher:
    """Records every message it "publishes"; can be told to fail.

    ``reject_times``: the next N events are refused (a failed attempt, like a nack).
    ``unroutable``: event types always refused as unroutable.
    ``unavailable_times``: the next N batches find the broker unreachable.
    """

    reject_times: int = 0
    unroutable: set[str] = field(default_factory=set)
    unavailable_times: int = 0
    messages: list[OutgoingMessage] = field(default_factory=list)
    batches: int = 0
    closed: bool = False

    def publish(self, events: Sequence[ClaimedEvent]) -> PublishResult:
        self.batches += 1
        result = PublishResult()
        if self.unavailable_times > 0:
            self.unavailable_times -= 1
            result.unavailable.extend(events)
            result.error = BrokerUnavailable("broker unavailable: simulated outage")
            return result
        guard = RunGuard()  # as the real publishers: a key's run stops at a refusal
        for event in events:
            if guard.stopped and guard.holds(event):
                result.withheld.append(event)
                continue
            if event.event_type in self.unroutable:
                result.rejected.append((event, f"unroutable: {event.event_type!r}"))
            elif self.reject_times > 0:
                self.reject_times -= 1
                result.rejected.append((event, "simulated nack"))
            else:
                try:
                    self.messages.append(message.prepare(event))
                except EventUnsendable as exc:  # as the real publishers: the row's fault
                    result.unsendable.append((event, str(exc)))
                    guard.failed(event)
                    continue
                result.confirmed.append(event)
                continue
            guard.failed(event)
        return result

    def close(self) -> None:
        self.closed = True

    @property
    def ids(self) -> list[int]:
        """Outbox ids of the published messages, in publish order."""
        return [m.outbox_id for m in self.messages]


@dataclass
class Row:
    """One outbox row of an :class:`InMemoryStore`; times are readings of its clock."""

    id: int
    event_type: str
    payload: Any
    headers: Mapping[str, Any] | None
    ordering_key: str | None
    seq: int | None
    created_at: datetime
    status: Status = Status.PENDING
    attempt: int = 0
    next_retry_at: float | None = None
    locked_by: str | None = None
    locked_until: float | None = None
    #: Random per row, as the database's default gives it (migration 0010).
    event_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    last_error: str | None = None
    #: The deadline (``outbox.expires_at``), a reading of the store's clock; None: none.
    expires_at: float | None = None


@dataclass
class InMemoryStore(Store):
    """The dispatch path's store (:class:`relay.store.dispatch_path.protocol.Store`) in plain
    Python.

    Leases, fences and per-key runs behave as the database's: a row is claimable when pending
    and due or when its lease ran out (``clock``, injected, says when); an outcome changes a
    row only while it is processing, held by that worker, at that attempt; a key's rows are
    leased in a run from its head and marked sent only in order. Not thread-safe beyond what
    the dispatcher's one database thread needs (each verb runs whole).
    """

    clock: Callable[[], float] = time.monotonic
    rows: dict[int, Row] = field(default_factory=dict)
    #: Per key: the number of its last row marked sent.
    progress: dict[str, int] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    #: Its messages' CloudEvents ``source``, as ``RELAY_SOURCE`` sets a database store's.
    source: str = "/relay/memory"

    def add(
        self,
        event_type: str,
        payload: Any,
        *,
        headers: Mapping[str, Any] | None = None,
        ordering_key: str | None = None,
        delay_seconds: float = 0.0,
        expires_in_seconds: float | None = None,
    ) -> int:
        """Enqueue a row (as ``relay.enqueue`` commits one, its deadline ``expires_in_seconds``
        after it is due); returns its id."""
        seq = None
        if ordering_key is not None:
            seq = 1 + sum(1 for r in self.rows.values() if r.ordering_key == ordering_key)
            self.progress.setdefault(ordering_key, 0)
        row = Row(next(self._ids), event_type, payload, headers, ordering_key, seq, _now())
        if delay_seconds:
            row.next_retry_at = self.clock() + delay_seconds
        if expires_in_seconds is not None:
            row.expires_at = self.clock() + delay_seconds + expires_in_seconds
        self.rows[row.id] = row
        return row.id

    def claim(
        self,
        worker: str,
        limit: int,
        lease_seconds: float,
        *,
        expired: bool = True,
        following: Sequence[tuple[str, int]] = (),
    ) -> list[ClaimedEvent]:
        now, picked = self.clock(), list[ClaimedEvent]()
        runs: dict[str, int] = {}  # per key: the number the run takes next
        held = dict(following)  # per key: the last number of the run this worker has in flight
        for row in sorted(self.rows.values(), key=lambda r: r.id):
            if len(picked) >= limit:
                break
            if row.ordering_key is not None:
                done = held.get(row.ordering_key, self.progress[row.ordering_key])
                if row.seq is not None and row.seq <= done:  # sent, or in flight
                    continue
                expected = runs.get(row.ordering_key, done + 1)
                if row.seq != expected or not self._due(row, now):
                    runs[row.ordering_key] = -1  # the run is cut here
                    continue
                runs[row.ordering_key] = expected + 1
            elif not self._due(row, now) or (row.status is Status.PROCESSING and not expired):
                continue
            row.status, row.locked_by = Status.PROCESSING, worker
            row.attempt += 1
            row.locked_until = now + lease_seconds
            picked.append(_claimed(row, self.source, now))
        return picked

    def complete(
        self,
        worker: str,
        *,
        sent: Sequence[ClaimedEvent] = (),
        rescheduled: Sequence[Rescheduled] = (),
        buried: Sequence[Buried] = (),
        released: Sequence[Released] = (),
    ) -> Completed:
        now = self.clock()
        n_sent = sum(self._send(worker, e) for e in sent if e.seq is None)
        n_sent += self._send_ordered(worker, [e for e in sent if e.seq is not None])
        n_resched = n_buried = 0
        for r in rescheduled:
            row = self._held(worker, r.event)
            if row is not None:
                row.status, row.last_error = Status.PENDING, r.error
                row.next_retry_at = now + r.delay_seconds
                row.locked_by = row.locked_until = None
                n_resched += 1
        for b in buried:
            row = self._held(worker, b.event)
            if row is not None:
                row.status, row.last_error, row.locked_until = Status.FAILED, b.error, None
                n_buried += 1
        n_released = sum(self.release(worker, g.events, g.delay_seconds, g.error) for g in released)
        expected = len(sent) + len(rescheduled) + len(buried) + sum(len(g.events) for g in released)
        lost = expected - n_sent - n_resched - n_buried - n_released
        return Completed(n_sent, n_resched, n_buried, lost, n_released)

    def release(
        self, worker: str, events: Sequence[ClaimedEvent], delay_seconds: float, error: str
    ) -> int:
        n = 0
        for event in events:
            row = self._held(worker, event)
            if row is not None:
                row.status, row.attempt, row.last_error = Status.PENDING, row.attempt - 1, error
                row.next_retry_at = self.clock() + delay_seconds
                row.locked_by = row.locked_until = None
                n += 1
        return n

    def renew(self, worker: str, events: Sequence[ClaimedEvent], lease_seconds: float) -> int:
        held = [row for row in (self._held(worker, e) for e in events) if row is not None]
        for row in held:
            row.locked_until = self.clock() + lease_seconds
        return len(held)

    def still_held(self, worker: str, events: Sequence[ClaimedEvent]) -> list[ClaimedEvent]:
        return [e for e in events if self._held(worker, e) is not None]

    def dispose(self) -> None:
        """Nothing to let go of."""

    def status_of(self, row_id: int) -> Status:
        """Where row ``row_id`` is in its life."""
        return self.rows[row_id].status

    def _due(self, row: Row, now: float) -> bool:
        if row.status is Status.PENDING:
            return row.next_retry_at is None or row.next_retry_at <= now
        lease = row.locked_until
        return row.status is Status.PROCESSING and lease is not None and lease < now

    def _held(self, worker: str, event: ClaimedEvent) -> Row | None:
        """The row ``event`` claimed, if ``worker`` still holds it at that attempt."""
        row = self.rows.get(event.id)
        if (
            row is None
            or row.status is not Status.PROCESSING
            or row.locked_by != worker
            or row.attempt != event.attempt
        ):
            return None
        return row

    def _send(self, worker: str, event: ClaimedEvent) -> bool:
        row = self._held(worker, event)
        if row is None:
            return False
        row.status, row.locked_until = Status.SENT, None
        return True

    def _send_ordered(self, worker: str, events: Sequence[ClaimedEvent]) -> int:
        """Mark each key's run in order from its progress, stopping at a gap or a lost row."""
        n = 0
        for event in sorted(events, key=lambda e: (str(e.ordering_key), e.seq or 0)):
            key = str(event.ordering_key)
            if event.seq == self.progress[key] + 1 and self._send(worker, event):
                self.progress[key] += 1
                n += 1
        return n


def _claimed(row: Row, source: str, now: float) -> ClaimedEvent:
    expired = row.expires_at is not None and row.expires_at <= now
    deadline = None
    if expired and row.expires_at is not None:  # as a claim reads it: an aware time
        deadline = _now() - timedelta(seconds=now - row.expires_at)
    return ClaimedEvent(
        row.id,
        row.event_type,
        row.payload,
        row.headers,
        row.ordering_key,
        row.attempt,
        row.created_at,
        row.seq,
        event_id=row.event_id,
        expired=expired,
        expires_at=deadline,
        source=source,
        # As a database store reads a row's headers: ones no message can carry mark a defect.
        defect=headers_fault(row.headers),
    )


def _now() -> datetime:
    return datetime.now(UTC)


__all__ = ["InMemoryPublisher", "InMemoryStore", "Row"]
