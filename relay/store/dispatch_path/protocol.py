"""What the dispatcher and its lease keeper need of a store, as a protocol.

:class:`relay.store.dispatch_path.store.DispatchStore` implements it over a database and
:class:`relay.testing.InMemoryStore` in plain Python (a subclass: it takes the protocol's
:meth:`Store.complete_and_claim`), so the dispatcher's decisions can be unit-tested on
doubles. No SQLAlchemy here: ``relay.testing`` imports this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from relay.records import Buried, ClaimedEvent, Completed, Released, Rescheduled


class Store(Protocol):
    """The dispatch path's verbs; every outcome is fenced on (id, ``locked_by``, attempt)."""

    def claim(
        self,
        worker: str,
        limit: int,
        lease_seconds: float,
        *,
        expired: bool = True,
        following: Sequence[tuple[str, int]] = (),
    ) -> list[ClaimedEvent]:
        """Lease up to ``limit`` claimable rows to ``worker``, oldest first, and commit; the
        unordered rows whose lease expired only when ``expired``; with ``following`` (key,
        last number) of runs ``worker`` has in flight, the rows that continue them too."""
        ...

    def complete(
        self,
        worker: str,
        *,
        sent: Sequence[ClaimedEvent] = (),
        rescheduled: Sequence[Rescheduled] = (),
        buried: Sequence[Buried] = (),
        released: Sequence[Released] = (),
    ) -> Completed:
        """Record a batch's outcomes; rows ``worker`` no longer holds count as ``lost``."""
        ...

    def complete_and_claim(
        self,
        worker: str,
        *,
        sent: Sequence[ClaimedEvent] = (),
        rescheduled: Sequence[Rescheduled] = (),
        buried: Sequence[Buried] = (),
        released: Sequence[Released] = (),
        limit: int,
        lease_seconds: float,
        expired: bool = True,
        following: Sequence[tuple[str, int]] = (),
    ) -> tuple[Completed, list[ClaimedEvent]]:
        """Record a batch's outcomes and lease the next batch at once. This default, for a
        store that subclasses the protocol, does one and then the other; a database store does
        both in one transaction."""
        done = self.complete(
            worker, sent=sent, rescheduled=rescheduled, buried=buried, released=released
        )
        return done, self.claim(worker, limit, lease_seconds, expired=expired, following=following)

    def release(
        self, worker: str, events: Sequence[ClaimedEvent], delay_seconds: float, error: str
    ) -> int:
        """Give rows back without spending their attempt, claimable after ``delay_seconds``."""
        ...

    def renew(self, worker: str, events: Sequence[ClaimedEvent], lease_seconds: float) -> int:
        """Extend the lease on rows ``worker`` still holds; returns how many it still holds."""
        ...

    def still_held(self, worker: str, events: Sequence[ClaimedEvent]) -> list[ClaimedEvent]:
        """The rows of ``events`` that ``worker`` still holds."""
        ...

    def dispose(self) -> None:
        """Let go of connections (a no-op for a store without any)."""
        ...
