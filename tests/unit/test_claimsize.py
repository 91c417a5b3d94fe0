"""How much one claim takes under the byte bound: the prefix that fits, a text's bytes, and
how many rows the next claim reads (``relay.store.dispatch_path.claimsize``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from relay.store.dispatch_path.claimsize import ClaimFit, fit_bytes, rows_bytes, text_bytes


@pytest.mark.parametrize(
    ("sizes", "bound", "first", "taken"),
    [
        ([10, 10, 10], 30, True, 3),  # exactly at the bound: all of it
        ([10, 10, 10], 29, True, 2),  # the row that would pass it is left
        ([50, 1, 1], 20, True, 1),  # a first row over the bound: claimed alone
        ([50, 1, 1], 20, False, 0),  # ... unless the claim already has rows
        ([5, 50, 1], 20, True, 1),  # a prefix: nothing after the row that did not fit
        ([], 20, True, 0),
    ],
)
def test_a_claim_takes_the_longest_prefix_within_the_bound(
    sizes: list[int], bound: int, first: bool, taken: int
) -> None:
    """Rows are leased in claim order while their total stays within the byte bound; the
    first whatever its size when the claim has nothing yet, so it is never stranded."""
    assert fit_bytes(sizes, bound, first=first) == taken


def test_a_claimed_text_counts_bytes_as_the_database_does() -> None:
    """ASCII text is its length; other text its UTF-8 length; a missing one nothing; what
    SQLite hands over for a payload written as a number or a blob is sized, never refused."""
    assert (text_bytes('{"a": 1}'), text_bytes('"é"'), text_bytes(None)) == (8, 4, 0)
    assert (text_bytes(12345), text_bytes(b"\xff\x00"), text_bytes(1.5)) == (5, 2, 3)
    assert text_bytes("\ud800") == 3  # a lone surrogate


@pytest.mark.parametrize(
    "texts",
    [
        [('{"a": 1}', None), ('"é"', '{"t": "x"}')],
        [("\ud800", '{"k": "\ud83d"}'), ('"ok"', None)],  # lone surrogates, each alone
        [(12345, None), ('{"a": 1}', b"\xff\x00"), (1.5, "0")],  # what SQLite may hand over
        [],
    ],
)
def test_claimed_rows_count_their_bytes_as_each_text_would(
    texts: list[tuple[object, object]],
) -> None:
    """The batch's bytes (one joined pass where every text is a string) are the sum of what
    each payload and headers text counts alone."""
    rows = [SimpleNamespace(payload=p, headers=h) for p, h in texts]
    assert rows_bytes(rows) == sum(text_bytes(p) + text_bytes(h) for p, h in texts)


def test_claims_under_large_rows_read_only_about_what_fits() -> None:
    """A claim the byte bound cut short makes the next read one row more than fitted; claims
    that fit whole double it back; a short claim below the bound (large rows gone) lifts it."""
    fit = ClaimFit()
    assert fit.ask(100) == 100
    fit.claimed(100, 4, 3_600_000, 4_194_304)  # 4 rows of 900 KB filled 4 MiB
    assert fit.ask(100) == 5
    fit.claimed(5, 4, 3_600_000, 4_194_304)  # the same again: steady
    assert fit.ask(100) == 5
    fit.claimed(5, 5, 50_000, 4_194_304)  # small rows again: all 5 fitted
    assert fit.ask(100) == 10
    fit.claimed(10, 3, 300, 4_194_304)  # the backlog ended below the bound
    assert fit.ask(100) == 100
    fit.claimed(100, 100, 20_000, 4_194_304)  # ordinary rows never set a cap
    assert fit.cap is None


def test_claims_size_rows_after_locking_them_only_while_rows_are_large() -> None:
    """Until a claim shows small rows, and again once rows average over 1/1024 of the bound,
    the next claim sizes its rows after locking them (whatever plan its lanes get); small rows
    are sized where the lanes read them, a lookup cheaper."""
    fit = ClaimFit()
    assert fit.size_late
    fit.claimed(100, 100, 20_000, 16_777_216)  # 200-byte rows
    assert not fit.size_late
    fit.claimed(100, 0, 0, 16_777_216)  # nothing found says nothing
    assert not fit.size_late
    fit.claimed(100, 18, 16_588_800, 16_777_216)  # 900 KiB rows
    assert fit.size_late
