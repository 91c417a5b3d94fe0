"""What a replay did (:class:`ReplayReport`, public as ``relay.ReplayReport``); pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ReplayReport:
    """What a replay did; ``last_id`` is where to resume from (``after``)."""

    replay_id: str
    #: The queue replayed to ("" for a replay to a NATS subject).
    queue: str
    #: Sent rows the selector matched (after ``after``).
    matched: int
    #: Events confirmed by the broker, in id order with none missing before the last.
    sent: int = 0
    #: The last id confirmed (every selected id up to it is confirmed); None: none yet.
    last_id: int | None = None
    #: Where this replay started (``after``).
    after: int | None = None
    dry_run: bool = False
    #: Why it stopped before the end (the broker, a refusal, a stop request); None: it did not.
    error: str | None = None
    selector: dict[str, Any] = field(default_factory=dict)
    #: The NATS JetStream subject replayed to (None: a replay to a queue), the stream that
    #: captures it, and the stream sequences the replay's messages were stored at.
    subject: str | None = None
    stream: str | None = None
    first_sequence: int | None = None
    last_sequence: int | None = None

    @property
    def destination(self) -> str:
        """What was replayed to, in words: ``queue 'q'`` or ``subject 's' (stream S)``."""
        if self.subject is None:
            return f"queue {self.queue!r}"
        return f"subject {self.subject!r}" + (f" (stream {self.stream})" if self.stream else "")

    @property
    def complete(self) -> bool:
        return self.error is None

    @property
    def resume_after(self) -> int | None:
        """The ``after`` of the replay that goes on from here."""
        return self.last_id if self.last_id is not None else self.after

    def as_dict(self) -> dict[str, Any]:
        return {
            "replay_id": self.replay_id,
            "queue": self.queue,
            "subject": self.subject,
            "stream": self.stream,
            "first_sequence": self.first_sequence,
            "last_sequence": self.last_sequence,
            "matched": self.matched,
            "sent": self.sent,
            "last_id": self.last_id,
            "dry_run": self.dry_run,
            "complete": self.complete,
            "error": self.error,
            "resume_after": None if self.complete else self.resume_after,
        }

    def describe(self) -> str:
        if self.dry_run:
            return f"dry run: would replay {self.matched} sent events to {self.destination}"
        if self.complete:
            return f"replayed {self.sent} sent events to {self.destination} ({self.replay_id})"
        return (
            f"replay {self.replay_id} to {self.destination} stopped after {self.sent} of "
            f"{self.matched} events: {self.error}; last id confirmed: {self.last_id or '-'}"
        )


__all__ = ["ReplayReport"]
