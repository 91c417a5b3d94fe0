"""Claims bounded by bytes (``RELAY_BATCH_MAX_BYTES``) on every database: a claim's payload and
headers stay within the bound, a row larger than it is still claimed alone, and a key's run is
cut short, never split or reordered."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.records import ClaimedEvent
from relay.store import dialects
from relay.store.dispatch_path.store import DispatchStore
from relay.store.schema.tables import outbox


def _enqueue(engine: sa.Engine, sizes: Sequence[int], **kw: object) -> list[int]:
    """One committed event per size, its payload a string of about that many bytes; every
    tenth of ``é`` (2 bytes in UTF-8, 6 as the ``\u00e9`` MariaDB stores), so the bound is
    seen to count the database's bytes, not characters. Returns the ids."""
    with Session(engine) as session, session.begin():
        return [
            relay.enqueue(
                session, "big.event", {"s": "é" * (n // 6) if i % 10 == 9 else "x" * n}, **kw
            )  # type: ignore[arg-type]
            for i, n in enumerate(sizes)
        ]


def _bytes(engine: sa.Engine) -> dict[int, int]:
    """Each row's payload and headers in bytes, as the database counts them for the bound."""
    dialect = dialects.for_name(engine.dialect.name)
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(outbox.c.id, dialect.row_bytes())).all())  # type: ignore[arg-type]


def _drain(store: DispatchStore, limit: int = 100) -> list[list[ClaimedEvent]]:
    """Claim and mark sent until a claim finds nothing; every batch, in claim order."""
    batches = []
    while batch := store.claim("w", limit, lease_seconds=60):
        batches.append(batch)
        store.complete("w", sent=batch)
        assert len(batches) < 1000, "the drain does not end"
    return batches


def test_a_claim_stays_within_the_byte_bound_and_drains_everything(engine: sa.Engine) -> None:
    """Rows of 10-30 KB under a bound of 100 KB: every claim holds at most 100 KB, oldest rows
    first, and the claims together take every row once."""
    ids = _enqueue(engine, [10_000 + 2_000 * (i % 11) for i in range(60)])
    size = _bytes(engine)
    bound = 100_000
    batches = _drain(DispatchStore(engine, batch_max_bytes=bound))
    claimed = [e.id for batch in batches for e in batch]
    assert claimed == ids
    for batch in batches:
        assert sum(size[e.id] for e in batch) <= bound
    # No claim was cut much below the bound (the store reads fewer rows after a cut claim).
    assert sum(size.values()) // bound <= len(batches) <= 3 * sum(size.values()) // bound


def test_a_row_larger_than_the_bound_is_claimed_alone(engine: sa.Engine) -> None:
    """A row of 50 KB under a bound of 20 KB is never stranded: a claim takes it alone, and the
    small rows behind it come after it."""
    big, *small = _enqueue(engine, [50_000, 100, 100, 100])
    store = DispatchStore(engine, batch_max_bytes=20_000)
    assert [e.id for e in store.claim("w", 100, lease_seconds=60)] == [big]
    assert [e.id for batch in _drain(store) for e in batch] == small


def test_headers_count_toward_the_bound(engine: sa.Engine) -> None:
    """Headers are held like the payload: rows of small payloads with 5 KB of headers fill a
    bound of 12 KB two at a time."""
    ids = _enqueue(engine, [10] * 4, headers={"trace": "t" * 5_000})
    size = _bytes(engine)
    assert all(n > 5_000 for n in size.values())
    batches = _drain(DispatchStore(engine, batch_max_bytes=12_000))
    assert [[e.id for e in b] for b in batches] == [ids[:2], ids[2:]]


def test_a_keys_run_is_cut_short_in_order_and_never_split(engine: sa.Engine) -> None:
    """Two keys of 20 rows of 3-6 KB and unordered rows between them, bound 40 KB: every
    claim stays within the bound, each key's rows are claimed as runs continuing its last one,
    and the drain publishes every key in its order."""
    ids = []
    for _ in range(20):
        ids += _enqueue(engine, [3_000], ordering_key="a")
        ids += _enqueue(engine, [6_000], ordering_key="b")
        ids += _enqueue(engine, [4_000])
    size = _bytes(engine)
    bound = 40_000
    batches = _drain(DispatchStore(engine, batch_max_bytes=bound))
    assert sorted(e.id for b in batches for e in b) == sorted(ids)
    seen: dict[str | None, list[int]] = {"a": [], "b": []}
    for batch in batches:
        assert sum(size[e.id] for e in batch) <= bound
        for event in batch:
            if event.ordering_key is not None:
                seen[event.ordering_key].append(event.seq or 0)
    assert seen == {"a": list(range(1, 21)), "b": list(range(1, 21))}
    assert len(batches) > 5, "the bound never cut a claim"


def test_oversized_heads_and_rows_are_each_claimed_at_most_one_per_lane(
    engine: sa.Engine,
) -> None:
    """Keyed and unordered rows each larger than the bound: a claim takes at most one of each
    lane (the first whatever its size), and the drain still moves every row, keys in order."""
    ids = []
    for _ in range(3):
        ids += _enqueue(engine, [30_000], ordering_key="k")
        ids += _enqueue(engine, [30_000])
    batches = _drain(DispatchStore(engine, batch_max_bytes=10_000))
    assert sorted(e.id for b in batches for e in b) == sorted(ids)
    for batch in batches:
        assert len([e for e in batch if e.seq is None]) <= 1
        assert len([e for e in batch if e.seq is not None]) <= 1
    keyed = [e.seq for b in batches for e in b if e.seq is not None]
    assert keyed == [1, 2, 3]


@pytest.mark.parametrize("limit", [1, 3])
def test_the_row_limit_still_applies_under_the_byte_bound(engine: sa.Engine, limit: int) -> None:
    """Small rows under a large bound: the claim is bounded by rows, as before."""
    _enqueue(engine, [10] * 5)
    store = DispatchStore(engine, batch_max_bytes=1_000_000)
    assert len(store.claim("w", limit, lease_seconds=60)) == limit
