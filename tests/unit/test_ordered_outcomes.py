"""How a batch's verdicts are cut per ordering key: nothing after a key's first failure is sent."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from relay.ordering import hold_back_after_failures
from relay.records import ClaimedEvent, PublishResult

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _event(id_: int, key: str | None, seq: int | None) -> ClaimedEvent:
    return ClaimedEvent(id_, "e", {}, None, key, 1, NOW, seq)


@pytest.mark.parametrize(
    ("verdicts", "sent", "rejected", "held_back"),
    [
        # key k: 1 ok, 2 nacked, 3 ok (already in the queue: confirms per batch) -> 3 held back
        ("k1+ k2- k3+", ["k1"], ["k2"], ["k3"]),
        # a row refused before sending withholds the rest of its key
        ("k1+ k2- k3w k4w", ["k1"], ["k2"], ["k3", "k4"]),
        # the broker went away at 2: 3 was confirmed before the reconnect failed
        ("k1+ k2u k3+", ["k1"], [], ["k3"]),
        # other keys and unordered rows are not affected
        ("k1- j1+ j2+ _1+ _2-", ["j1", "j2", "_1"], ["k1", "_2"], []),
        # two failures in one key: only the first is the key's failure, the second waits
        ("k1+ k2- k3-", ["k1"], ["k2"], ["k3"]),
    ],
)
def test_a_keys_rows_after_its_first_failure_are_held_back(
    verdicts: str, sent: list[str], rejected: list[str], held_back: list[str]
) -> None:
    """Per key, rows are sent up to the first one that did not go through; later rows of that
    key, confirmed or not, are held back to be given back without spending an attempt."""
    result = PublishResult()
    names: dict[int, str] = {}
    for i, verdict in enumerate(verdicts.split(), start=1):
        name, outcome = verdict[:-1], verdict[-1]
        key = None if name[0] == "_" else name[0]
        event = _event(i, key, None if key is None else int(name[1:]))
        names[i] = name
        if outcome == "+":
            result.confirmed.append(event)
        elif outcome == "-":
            result.rejected.append((event, "nack"))
        elif outcome == "w":
            result.withheld.append(event)
        else:
            result.unavailable.append(event)
    back = hold_back_after_failures(result)
    assert [names[e.id] for e in result.confirmed] == sent
    assert [names[e.id] for e, _ in result.rejected] == rejected
    assert sorted(names[e.id] for e in back) == held_back
    assert result.withheld == []
