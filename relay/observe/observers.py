"""What the dispatcher tells observers: claims, publishes and recorded outcomes; pure.

The dispatcher calls an :class:`Observer` at four points and knows nothing else about metrics
or tracing: :mod:`relay.observe.metrics` (Prometheus) and :mod:`relay.observe.tracing`
(OpenTelemetry) implement it, each imported only when it is used. The base class does nothing, so a
dispatcher without observers pays four method calls a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from relay.records import ClaimedEvent, PublishResult

#: Publishes a batch: the publisher's ``publish``, or the next observer's wrapping of it.
Send = Callable[[list[ClaimedEvent]], PublishResult]


@dataclass(frozen=True, slots=True)
class Recorded:
    """The outcomes of one batch as the store recorded them."""

    sent: Sequence[ClaimedEvent]
    rescheduled: Sequence[ClaimedEvent]
    #: Ended ``failed`` (no attempt left, the row's own fault, or past its deadline).
    failed: Sequence[ClaimedEvent]
    #: Given back without spending an attempt.
    released: int
    #: Outcomes the fence refused: another worker had reclaimed these rows.
    lost: int
    #: False when the fence refused some outcomes: the lists above then name more rows than
    #: were recorded, and only the counts of :attr:`counts` are exact.
    exact: bool
    #: Rows each statement changed: ``sent``, ``rescheduled``, ``failed``.
    counts: tuple[int, int, int]
    #: Among ``failed``: dead-lettered unpublished because their deadline had passed.
    expired: Sequence[ClaimedEvent] = ()


class Observer:
    """Hooks of one dispatcher; every one a no-op here. Called from the dispatcher's threads
    (the database thread records outcomes): implementations must be thread-safe."""

    def claimed(self, events: Sequence[ClaimedEvent], seconds: float) -> None:
        """A transaction leased ``events`` (possibly none) in ``seconds``."""

    def publish(self, events: list[ClaimedEvent], send: Send) -> PublishResult:
        """Publish ``events`` through ``send``: an observer may time it, or send copies of the
        events with other headers (trace context); the result must be ``send``'s."""
        return send(events)

    def recorded(self, outcome: Recorded) -> None:
        """The store recorded one batch's outcomes."""

    def lease_lost(self, count: int) -> None:
        """``count`` rows were reclaimed by another worker before this one published them."""

    def broker_blocked(self, reason: str | None) -> None:
        """The events broker blocked publishing (``reason``), or unblocked it (None)."""


class Observers(Observer):
    """Several observers as one: each hook in turn, ``publish`` nested (first outermost)."""

    def __init__(self, observers: Sequence[Observer]) -> None:
        self.observers = tuple(observers)

    def claimed(self, events: Sequence[ClaimedEvent], seconds: float) -> None:
        for o in self.observers:
            o.claimed(events, seconds)

    def publish(self, events: list[ClaimedEvent], send: Send) -> PublishResult:
        for o in reversed(self.observers):
            send = _wrapped(o, send)
        return send(events)

    def recorded(self, outcome: Recorded) -> None:
        for o in self.observers:
            o.recorded(outcome)

    def lease_lost(self, count: int) -> None:
        for o in self.observers:
            o.lease_lost(count)

    def broker_blocked(self, reason: str | None) -> None:
        for o in self.observers:
            o.broker_blocked(reason)


def _wrapped(observer: Observer, send: Send) -> Send:
    return lambda events: observer.publish(events, send)
