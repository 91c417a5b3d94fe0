"""Per-key ordering, in one place: cutting a key's run, holding back after a failure, and what
may be marked sent (docs/ordering.md).

A row with an ``ordering_key`` carries ``seq``, its number within the key (taken at enqueue);
an unordered row has ``seq`` None and none of this applies to it. A key's rows are published
strictly in ``seq`` order and marked sent only up to the first one that did not go through,
so nothing overtakes a failed row. Pure: no I/O, no clock, no third-party import; the store,
the publishers and the dispatcher call these functions instead of reasoning about ``seq``.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from relay.records import ClaimedEvent, PublishResult, Stall, StalledKey

#: Why the rows behind a key's failed (or lost) row are given back without spending an attempt.
BEHIND_A_FAILURE = "an earlier row of its ordering key failed in the same batch"


def cut_runs(heads: Sequence[Any], found: Sequence[Any], max_bytes: int | None = None) -> list[int]:
    """Ids of ``found`` rows that extend their head's run without a gap, in key order: a run
    stops at the first number missing (uncommitted, locked by another claimer, not due), or,
    with ``max_bytes``, at the first row whose ``size`` would take the runs' total past it (a
    run is cut short, never split: what is left of the key waits for the next claim).

    ``heads`` and ``found`` are rows with ``id``, ``ordering_key`` and ``seq`` attributes
    (and ``size`` when ``max_bytes`` is given)."""
    by_place = {(r.ordering_key, r.seq): r for r in found}
    ids: list[int] = []
    total = 0
    for head in heads:
        seq = head.seq + 1
        while (row := by_place.get((head.ordering_key, seq))) is not None:
            if max_bytes is not None:
                if total + row.size > max_bytes:
                    break
                total += row.size
            ids.append(row.id)
            seq += 1
    return ids


class RunGuard:
    """One publish's memory of the keys whose run failed in it: a publisher asks
    :meth:`holds` before it sends an event and calls :meth:`failed` when one is refused before
    it reached the broker, so a later row of that key is withheld instead of overtaking it.

    ``stopped`` stays empty (falsy) until a failure, so the happy path costs a publisher one
    truth test per event: ``if guard.stopped and guard.holds(event)``."""

    __slots__ = ("stopped",)

    def __init__(self) -> None:
        #: Keys whose run stopped at a failure in this publish.
        self.stopped: set[str | None] = set()

    def holds(self, event: ClaimedEvent) -> bool:
        """Whether ``event`` must not be published: an earlier row of its key failed."""
        return event.seq is not None and event.ordering_key in self.stopped

    def failed(self, event: ClaimedEvent) -> None:
        """``event`` was refused before reaching the broker: its key's run stops here."""
        if event.seq is not None:
            self.stopped.add(event.ordering_key)


def hold_back_after_failures(result: PublishResult) -> list[ClaimedEvent]:
    """Take out of ``result`` every row of an ordering key that comes after the key's first
    row that did not go through (rejected, withheld or unavailable), and return them: a key's
    rows are marked sent only up to its first failure, so nothing overtakes the failed row.

    With confirms awaited per batch, rows after a nacked or returned one may have reached the
    broker already; they are given back and published again after it (duplicates, in order).
    A batch where everything was confirmed costs nothing here.
    """
    if not (result.rejected or result.withheld or result.unavailable or result.unsendable):
        return []
    refused = [e for e, _ in (*result.rejected, *result.unsendable)]
    everything = [*result.confirmed, *refused, *result.withheld]
    failures = [*refused, *result.withheld, *result.unavailable]
    first_failure: dict[str | None, int] = {}
    for event in failures:
        if event.seq is not None:
            seen = first_failure.get(event.ordering_key)
            if seen is None or event.seq < seen:
                first_failure[event.ordering_key] = event.seq
    result.withheld = []
    if not first_failure:
        return []

    def behind(event: ClaimedEvent) -> bool:
        first = first_failure.get(event.ordering_key)
        return event.seq is not None and first is not None and event.seq > first

    held_back = [e for e in everything if behind(e)]
    result.confirmed = [e for e in result.confirmed if not behind(e)]
    result.rejected = [(e, err) for e, err in result.rejected if not behind(e)]
    result.unsendable = [(e, err) for e, err in result.unsendable if not behind(e)]
    return held_back


def behind_refusals(
    events: Sequence[ClaimedEvent], refused: Iterable[ClaimedEvent]
) -> tuple[list[ClaimedEvent], list[ClaimedEvent]]:
    """Split the rows of ``events`` that are not ``refused`` (dead-lettered before publishing)
    into those that may be published and those of a key after its first refused row: those are
    given back unpublished, so that nothing overtakes the row its key is now held behind."""
    refused_ids: set[int] = set()
    first: dict[str | None, int] = {}
    for event in refused:
        refused_ids.add(event.id)
        if event.seq is not None and event.seq < first.get(event.ordering_key, event.seq + 1):
            first[event.ordering_key] = event.seq
    todo, behind = [], []
    for event in events:
        if event.id in refused_ids:
            continue
        head = first.get(event.ordering_key)
        if event.seq is not None and head is not None and event.seq > head:
            behind.append(event)
        else:
            todo.append(event)
    return todo, behind


def broken_runs(events: Iterable[ClaimedEvent], kept: Sequence[ClaimedEvent]) -> list[ClaimedEvent]:
    """The rows of ``kept`` to give up because their key lost a row of ``events`` (the batch
    before a lease re-check): another worker took that row, and these come after it."""
    kept_ids = {e.id for e in kept}
    lost = {e.ordering_key for e in events if e.id not in kept_ids}
    broken = {e.ordering_key for e in events if e.seq is not None} & lost
    if not broken:
        return []
    return [e for e in kept if e.seq is not None and e.ordering_key in broken]


def run_ends(events: Iterable[ClaimedEvent]) -> list[tuple[str, int]]:
    """(key, last number) of each key's run among ``events``: where a claim made while they
    are in flight may go on with the key (its next run)."""
    ends: dict[str, int] = {}
    for event in events:
        if event.seq is not None and event.ordering_key is not None:
            ends[event.ordering_key] = max(event.seq, ends.get(event.ordering_key, 0))
    return sorted(ends.items())


def keys_of(events: Iterable[ClaimedEvent]) -> set[str | None]:
    """The ordering keys of the ordered rows among ``events``."""
    return {e.ordering_key for e in events if e.seq is not None}


def split_keys(
    events: Sequence[ClaimedEvent], keys: set[str | None]
) -> tuple[list[ClaimedEvent], list[ClaimedEvent]]:
    """``events`` split into those of no key in ``keys`` and the ordered rows of those keys:
    a key's next run to give back, because the run before it did not all go through (or
    its lease was lost), so that nothing of the key overtakes the row that failed."""
    kept: list[ClaimedEvent] = []
    given_up: list[ClaimedEvent] = []
    for event in events:
        (given_up if event.seq is not None and event.ordering_key in keys else kept).append(event)
    return kept, given_up


def sendable_runs(
    sent: Iterable[ClaimedEvent], progress: Mapping[str, int]
) -> dict[str, list[ClaimedEvent]]:
    """Per key, the confirmed ordered rows that may be marked sent: those that continue the
    key's ``progress`` (its last sent ``seq``) without a gap, in ``seq`` order. A key's sent
    rows are then always exactly those up to its progress; a row after a gap waits.

    ``progress`` must hold every key of ``sent`` (0 for a key with nothing sent yet)."""
    runs: dict[str, list[ClaimedEvent]] = {}
    for event in sorted(sent, key=lambda e: (str(e.ordering_key), e.seq or 0)):
        key = str(event.ordering_key)
        run = runs.setdefault(key, [])
        if event.seq == int(progress[key]) + len(run) + 1:
            run.append(event)
    return runs


__all__ = [
    "BEHIND_A_FAILURE",
    "RunGuard",
    "broken_runs",
    "cut_runs",
    "hold_back_after_failures",
    "keys_of",
    "run_ends",
    "sendable_runs",
    "split_keys",
    "stalled_key",
]


def publish_order(events: Iterable[ClaimedEvent]) -> list[ClaimedEvent]:
    """``events`` oldest id first, except that each key's rows take that key's places in
    ``seq`` order: an id is drawn when a row is inserted, its number when the key's turn comes
    (a writer that waited on the key's lock has an older id and a later number), so id order
    alone could publish a key out of order."""
    ordered = sorted(events, key=lambda e: e.id)
    by_key: dict[str | None, list[ClaimedEvent]] = {}
    for event in ordered:
        if event.seq is not None:
            by_key.setdefault(event.ordering_key, []).append(event)
    runs = {key: iter(sorted(rows, key=lambda e: e.seq or 0)) for key, rows in by_key.items()}
    return [next(runs[e.ordering_key]) if e.seq is not None else e for e in ordered]


def stalled_key(
    key: str,
    stall: Stall,
    head_seq: int,
    head_id: int | None = None,
    last_error: str | None = None,
    resumes_at: int | None = None,
) -> StalledKey:
    """A stalled key with what holds it and the command or statement that lets it go on, the
    key quoted for a shell or for SQL (it is the producer's text: pasting the fix must do what
    it says)."""
    head = f"row {head_id} (number {head_seq})"
    in_sql = "'" + key.replace("'", "''") + "'"
    behind = f"WHERE ordering_key = {in_sql} AND sent_seq = {head_seq - 1}"
    if stall is Stall.FAILED:
        error = (last_error or "").strip().splitlines()
        reason = error[0][:200] if error else "no error recorded"
        why = f"{head} failed ({reason}); the key's later rows wait behind it"
        arg = shlex.quote(key)
        fix = (
            f"relay failed retry --key {arg} (once the cause is fixed), or "
            f"relay failed purge --key {arg} (the key goes on without it)"
        )
    elif stall is Stall.MISSING:
        resumes = "" if resumes_at is None else f" from number {resumes_at} on"
        why = f"no row has number {head_seq}; the key's rows wait{resumes}"
        to = "<its next number - 1>" if resumes_at is None else str(resumes_at - 1)
        fix = (
            "write the missing row, or skip the gap: "
            f"UPDATE outbox_progress SET sent_seq = {to} {behind}"
        )
    else:
        why = f"{head} is sent but the key's progress is still {head_seq - 1}"
        fix = f"UPDATE outbox_progress SET sent_seq = {head_seq} {behind}"
    return StalledKey(key, stall, head_seq, head_id, resumes_at, why, fix)
