"""An outbox seen from an application's tests: the events its code committed, a synchronous
drain into an in-memory broker, and an assertion whose failure shows expected and committed.

The fixtures of ``relay.testing.pytest_plugin`` hand one out; it works without pytest too.
It reads the outbox through the operations store and relays through the real dispatcher
(claim, publish, record), so what a test sees is what the relay would do: an event from a
rolled-back transaction was never in the table, and one the relay would dead-letter (past its
deadline, unsendable) is not published by :meth:`TestOutbox.drain` either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from relay.config import Settings
from relay.dispatch.dispatcher import Dispatcher
from relay.publishers.message import OutgoingMessage
from relay.records import Status
from relay.store.dispatch_path.store import DispatchStore
from relay.store.operations.filters import EventFilter
from relay.store.operations.store import OperationsStore
from relay.testing.doubles import InMemoryPublisher

#: Rows :meth:`TestOutbox.committed` reads at most: a test that writes more asks for trouble.
MAX_EVENTS = 10_000


@dataclass(frozen=True)
class CommittedEvent:
    """One outbox row as the code under test committed it (and where the relay has it now)."""

    id: int
    event_type: str
    payload: Any
    ordering_key: str | None
    headers: Mapping[str, Any]
    status: str

    def __str__(self) -> str:
        key = "" if self.ordering_key is None else f" key={self.ordering_key}"
        return f"{self.event_type} {self.payload!r}{key} ({self.status})"


#: What :meth:`TestOutbox.assert_committed` takes per event: an event type, or an event type and
#: the payload it must equal.
Expected = str | tuple[str, Any]


@dataclass
class TestOutbox:
    """The outbox of ``engine``, from the id it had when the test started (``after``)."""

    __test__ = False  # a helper, not a test class, whatever pytest collects

    engine: sa.Engine
    #: Rows with an id above this are the test's (read when the outbox was set up).
    after: int = 0
    #: The in-memory broker :meth:`drain` publishes into: ``broker.messages`` holds them all.
    broker: InMemoryPublisher = field(default_factory=InMemoryPublisher)

    @classmethod
    def starting_now(cls, engine: sa.Engine) -> TestOutbox:
        """An outbox that shows only the events committed from now on."""
        return cls(engine, after=_newest_id(engine))

    def committed(self, event_type: str | None = None) -> list[CommittedEvent]:
        """The events committed since the outbox was set up, oldest first, of ``event_type``
        (a glob: ``order.*``) when given; whatever their status (sent ones included)."""
        store = OperationsStore(self.engine)
        rows = store.list_events(
            EventFilter(event_type=event_type), limit=MAX_EVENTS, after=self.after
        )
        found = []
        for listed in rows:  # the list has no payload: each row's details have
            r = store.event(int(listed["id"]))
            if r is not None:
                found.append(
                    CommittedEvent(
                        id=int(r["id"]),
                        event_type=str(r["event_type"]),
                        payload=r["payload"],
                        ordering_key=r["ordering_key"],
                        headers=r["headers"] or {},
                        status=str(r["status"]),
                    )
                )
        return found

    def drain(self, **settings: Any) -> list[OutgoingMessage]:
        """Relay every pending event now, synchronously, into :attr:`broker`; returns the
        messages this drain published (in publish order). ``settings`` override the relay's
        (``max_attempts=1``, ``exchange="orders"``, ...). Delayed events not yet due stay."""
        before = len(self.broker.messages)
        url = self.engine.url.render_as_string(hide_password=False)
        relay_settings = Settings(database_url=url, **settings)
        dispatcher = Dispatcher(DispatchStore(self.engine), self.broker, relay_settings)
        try:
            dispatcher.drain(budget_seconds=60.0)
        finally:
            dispatcher.close()
        return self.broker.messages[before:]

    def pending(self) -> list[CommittedEvent]:
        """The committed events the relay has not finished with (pending or processing)."""
        done = {Status.SENT.value, Status.FAILED.value}
        return [e for e in self.committed() if e.status not in done]

    def assert_committed(self, *expected: Expected, exactly: bool = True) -> None:
        """The events committed since the start are ``expected``, in order: each an event type,
        or ``(event_type, payload)``. ``exactly=False``: they are among them, in that order.
        A failure shows both lists."""
        events = self.committed()
        if _matches(expected, events, exactly):
            return
        shown = "\n".join(f"  {i}. {_expected_text(e)}" for i, e in enumerate(expected, 1))
        got = "\n".join(f"  {i}. {e}" for i, e in enumerate(events, 1))
        how = "exactly these events" if exactly else "these events, in this order"
        raise AssertionError(
            f"the outbox does not hold {how}\n"
            f"expected ({len(expected)}):\n{shown or '  (none)'}\n"
            f"committed ({len(events)}):\n{got or '  (none)'}"
        )


def _newest_id(engine: sa.Engine) -> int:
    """The highest outbox id now (the operations store pages by id: read the last page)."""
    store, after, newest = OperationsStore(engine), None, 0
    while rows := store.list_events(EventFilter(), limit=MAX_EVENTS, after=after):
        newest = after = int(rows[-1]["id"])
    return newest


def _one(expected: Expected, event: CommittedEvent) -> bool:
    if isinstance(expected, str):
        return event.event_type == expected
    event_type, payload = expected
    return event.event_type == event_type and event.payload == payload


def _matches(expected: Sequence[Expected], events: list[CommittedEvent], exactly: bool) -> bool:
    if exactly:
        return len(expected) == len(events) and all(map(_one, expected, events))
    found = iter(events)
    return all(any(_one(e, event) for event in found) for e in expected)


def _expected_text(expected: Expected) -> str:
    if isinstance(expected, str):
        return f"{expected} (any payload)"
    return f"{expected[0]} {expected[1]!r}"


__all__ = ["CommittedEvent", "TestOutbox"]
