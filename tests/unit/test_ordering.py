"""relay.ordering from tables: cutting a key's run, holding back after a failure, what may be
marked sent. Events are written ``k2`` (key ``k``, seq 2) or ``_3`` (unordered, id 3)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from relay.ordering import (
    RunGuard,
    broken_runs,
    cut_runs,
    hold_back_after_failures,
    keys_of,
    publish_order,
    run_ends,
    sendable_runs,
    split_keys,
)
from relay.records import ClaimedEvent, PublishResult

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _events(spec: str) -> list[ClaimedEvent]:
    """``"k1 k2 _7"`` -> events with ids 1, 2, 3 (unique across keys)."""
    events = []
    for i, name in enumerate(spec.split(), start=1):
        key = None if name[0] == "_" else name[0]
        events.append(
            ClaimedEvent(i, "e", {}, None, key, 1, NOW, None if key is None else int(name[1:]))
        )
    return events


def _names(events: list[ClaimedEvent]) -> list[str]:
    return [f"{e.ordering_key}{e.seq}" if e.seq is not None else f"_{e.id}" for e in events]


def _place(id_: int, key: str, seq: int) -> SimpleNamespace:
    return SimpleNamespace(id=id_, ordering_key=key, seq=seq)


@pytest.mark.parametrize(
    ("heads", "found", "run"),
    [
        # a head with the next numbers found extends through all of them
        ([("k", 1)], [("k", 2), ("k", 3)], ["k2", "k3"]),
        # a missing number (uncommitted or not due) cuts the run there
        ([("k", 1)], [("k", 2), ("k", 4)], ["k2"]),
        # a head with nothing behind it is a run of one (only the head, leased elsewhere)
        ([("k", 5)], [("j", 6)], []),
        # runs are cut per key, in the heads' order
        ([("j", 3), ("k", 1)], [("k", 2), ("j", 4), ("j", 5), ("k", 4)], ["j4", "j5", "k2"]),
    ],
)
def test_a_claim_cuts_each_run_at_its_first_gap(
    heads: list[tuple[str, int]], found: list[tuple[str, int]], run: list[str]
) -> None:
    """A claim leases a head's next numbers only while they follow without a gap."""
    ids = {f"{k}{s}": 100 + i for i, (k, s) in enumerate(found)}
    rows = [_place(ids[f"{k}{s}"], k, s) for k, s in found]
    head_rows = [_place(i, k, s) for i, (k, s) in enumerate(heads)]
    by_id = {v: k for k, v in ids.items()}
    assert [by_id[i] for i in cut_runs(head_rows, rows)] == run


@pytest.mark.parametrize(
    ("bound", "run"),
    [
        (None, ["j4", "j5", "k2", "k3"]),  # no byte bound: every run whole
        (30, ["j4", "j5", "k2"]),  # k3 would pass the bound: k's run stops at k2
        (15, ["j4"]),  # j5 would pass it, and so would k2
        (25, ["j4", "j5"]),  # k2 would pass it: k leases its head alone
        (0, []),  # nothing left of the bound: the heads alone
    ],
)
def test_a_claim_cuts_runs_short_at_the_byte_bound(bound: int | None, run: list[str]) -> None:
    """Runs grow in the heads' order while their sizes (10 bytes a row) stay within what is
    left of the bound; a run is cut short, never split: no row after one left out."""
    found = [("j", 4), ("j", 5), ("k", 2), ("k", 3)]
    ids = {f"{k}{s}": 100 + i for i, (k, s) in enumerate(found)}
    rows = [SimpleNamespace(id=ids[f"{k}{s}"], ordering_key=k, seq=s, size=10) for k, s in found]
    heads = [_place(1, "j", 3), _place(2, "k", 1)]
    by_id = {v: k for k, v in ids.items()}
    assert [by_id[i] for i in cut_runs(heads, rows, bound)] == run


@pytest.mark.parametrize(
    ("batch", "refused", "published", "withheld"),
    [
        # nothing refused: everything goes out
        ("k1 k2 _3", "", "k1 k2 _3", ""),
        # a refused row withholds the rest of its key, not other keys or unordered rows
        ("k1 k2 j1 k3 _5 j2", "k1", "j1 _5 j2", "k2 k3"),
        # a refused unordered row withholds nothing
        ("_1 k1 _3 k2", "_1", "k1 _3 k2", ""),
        # a refusal late in the run withholds only what follows it
        ("k1 k2 k3 k4", "k3", "k1 k2", "k4"),
    ],
)
def test_a_publish_withholds_a_keys_rows_after_a_refusal(
    batch: str, refused: str, published: str, withheld: str
) -> None:
    """The guard a publisher consults stops a key's run at the first row refused in it."""
    guard, sent, held = RunGuard(), [], []
    for event, name in zip(_events(batch), batch.split(), strict=True):
        if guard.stopped and guard.holds(event):
            held.append(name)
        elif name in refused.split():
            guard.failed(event)
        else:
            sent.append(name)
    assert (sent, held) == (published.split(), withheld.split())


def test_an_all_confirmed_batch_holds_nothing_back() -> None:
    """The happy path: every row confirmed, nothing held back, the result unchanged."""
    events = _events("k1 k2 _3 j1")
    result = PublishResult(confirmed=list(events))
    assert hold_back_after_failures(result) == []
    assert result.confirmed == events


@pytest.mark.parametrize(
    ("batch", "kept", "given_up"),
    [
        # every row still held: nothing to give up
        ("k1 k2 _3", "k1 k2 _3", ""),
        # the key's head was reclaimed: the rest of its run is given up, other rows kept
        ("k1 k2 k3 j1 _5", "k2 k3 j1 _5", "k2 k3"),
        # an unordered row lost breaks no key
        ("k1 _2 k2", "k1 k2", ""),
    ],
)
def test_a_key_that_lost_a_row_before_publishing_is_given_up(
    batch: str, kept: str, given_up: str
) -> None:
    """After a lease re-check, a key missing a row is given up whole: its rows come after it."""
    events = _events(batch)
    names = batch.split()
    still = [e for e, n in zip(events, names, strict=True) if n in kept.split()]
    assert _names(broken_runs(events, still)) == given_up.split()


@pytest.mark.parametrize(
    ("confirmed", "progress", "marked"),
    [
        # a run continuing the key's progress is marked whole
        ("k3 k4 k5", {"k": 2}, {"k": "k3 k4 k5"}),
        # a gap (k4 not confirmed) stops the run: k5 waits
        ("k3 k5", {"k": 2}, {"k": "k3"}),
        # a run that does not start at progress + 1 marks nothing
        ("k4 k5", {"k": 2}, {"k": ""}),
        # keys are independent; confirms out of order are sorted by seq
        ("j2 k1 j1", {"k": 0, "j": 0}, {"j": "j1 j2", "k": "k1"}),
    ],
)
def test_a_key_is_marked_sent_only_up_to_its_first_gap(
    confirmed: str, progress: dict[str, int], marked: dict[str, str]
) -> None:
    """A key's sent rows are always exactly those up to its progress: no gap is ever marked."""
    runs = sendable_runs(_events(confirmed), progress)
    assert {key: _names(run) for key, run in runs.items()} == {
        key: names.split() for key, names in marked.items()
    }


@pytest.mark.parametrize(
    ("spec", "order"),
    [
        # id order is kept where it agrees with every key's numbers
        ("k1 _2 j1 k2", ["k1", "_2", "j1", "k2"]),
        # a writer that waited on its key's lock holds an older id and a later number: the key's
        # rows swap places, other rows keep theirs
        ("k2 _2 k1 j1 k3", ["k1", "_2", "k2", "j1", "k3"]),
        # two keys both out of id order, interleaved
        ("j3 k2 j1 k1 j2", ["j1", "k1", "j2", "k2", "j3"]),
    ],
)
def test_a_batch_publishes_each_key_in_number_order_whatever_the_ids(
    spec: str, order: list[str]
) -> None:
    """publish_order: oldest id first, each key's rows in its places in seq order."""
    events = _events(spec)
    assert _names(publish_order(reversed(events))) == order


@pytest.mark.parametrize(
    ("spec", "ends"),
    [
        ("", []),
        ("_1 _2", []),
        ("a3 a4 a5 _9", [("a", 5)]),
        ("b7 a2 b8 a1", [("a", 2), ("b", 8)]),
    ],
)
def test_the_end_of_each_run_in_flight_is_its_keys_last_number(
    spec: str, ends: list[tuple[str, int]]
) -> None:
    """run_ends: per key, the last number held, where a claim meanwhile goes on with the key."""
    assert run_ends(_events(spec)) == ends


@pytest.mark.parametrize(
    ("failed", "spec", "kept", "given_up"),
    [
        ("", "a4 b2 _3", ["a4", "b2", "_3"], []),
        ("_1", "a4 b2 _3", ["a4", "b2", "_3"], []),  # an unordered failure holds no key
        ("a3", "a4 a5 b2 _4", ["b2", "_4"], ["a4", "a5"]),
        ("a3 b1", "a4 b2 _3", ["_3"], ["a4", "b2"]),
    ],
)
def test_the_next_run_of_a_key_that_did_not_all_go_through_is_given_up(
    failed: str, spec: str, kept: list[str], given_up: list[str]
) -> None:
    """split_keys(keys_of(...)): a batch leased while the one before it was published loses
    the rows of every key that failed in that one; unordered rows and other keys go on."""
    got_kept, got_given_up = split_keys(_events(spec), keys_of(_events(failed)))
    assert (_names(got_kept), _names(got_given_up)) == (kept, given_up)
