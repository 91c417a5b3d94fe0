"""Test doubles shipped with the package: an in-memory publisher that records and can fail."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from relay.exceptions import BrokerUnavailable
from relay.ordering import RunGuard
from relay.publishers import message
from relay.publishers.message import OutgoingMessage
from relay.records import ClaimedEvent, PublishResult


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
                self.messages.append(message.build(event))
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
