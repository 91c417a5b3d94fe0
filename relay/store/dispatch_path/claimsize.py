"""What one claim asks for (:class:`Ask`) and how much it takes under ``RELAY_BATCH_MAX_BYTES``:
the prefix of rows that fits, a claimed text's bytes, and how many rows the next claim reads
(:class:`ClaimFit`).

Pure: no I/O, no clock, no third-party import; the dialects and the dispatch store call it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from relay.store.dispatch_path.holds import NO_HOLD, Hold


@dataclass(frozen=True, slots=True)
class Ask:
    """What a claim asks for: up to ``limit`` rows leased to ``worker`` for ``lease_seconds``,
    unordered expired leases among them only when ``expired``; with ``max_bytes`` no more than
    that many bytes of payload and headers, the first row whatever its size if
    ``first_anyway``; rows ``hold`` holds back (paused, or left to a rate limit's lane) are
    left alone, and with a ``floor`` the pending unordered rows are read from that id on
    (``relay.store.dispatch_path.floors``). ``following`` names the keys whose run the
    worker has in flight, each with the last number it holds: when no other key's head is
    free, the claim leases each one's next run (the numbers after it), which no other worker
    can claim while that run is held."""

    worker: str
    limit: int
    lease_seconds: float
    expired: bool = True
    max_bytes: int | None = None
    first_anyway: bool = True
    hold: Hold = NO_HOLD
    floor: int | None = None
    following: tuple[tuple[str, int], ...] = ()
    #: Size the rows after locking them (``Dialect.within_bytes``): while rows are large.
    size_late: bool = False


class RunEnd(NamedTuple):
    """A key whose run a claiming worker has in flight, and the last number of that run:
    where :func:`relay.ordering.cut_runs` starts the key's next run (as it does after a
    head)."""

    ordering_key: str
    seq: int


def fit_bytes(sizes: Iterable[int], max_bytes: int, *, first: bool = True) -> int:
    """How many of ``sizes`` (rows in claim order) one claim leases under ``max_bytes``: the
    longest prefix whose total stays within it. With ``first`` the first row counts whatever
    its size, so a row larger than the bound is still claimed (alone), never stranded."""
    total = taken = 0
    for size in sizes:
        total += size
        if total > max_bytes and not (first and taken == 0):
            break
        taken += 1
    return taken


def text_bytes(text: object) -> int:
    """The UTF-8 length of a claimed row's JSON text, as the database counts it for the bound
    (``str.isascii`` is a flag lookup, so an ASCII text costs no encoding). Whatever else a
    row holds (SQLite keeps a number or a blob as it was written) counts as its bytes or its
    text: sizing never raises for a row the decoder will refuse (docs/guarantees.md, "What a
    bad row does")."""
    if text is None:
        return 0
    if isinstance(text, str):
        return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if isinstance(text, bytes | bytearray | memoryview):
        return len(text)
    return len(str(text))


def rows_bytes(rows: Sequence[Any]) -> int:
    """The bytes of claimed rows' payload and headers, as :func:`text_bytes` counts each: the
    texts joined and measured in one pass of C when all are strings (always, but on SQLite),
    instead of two Python calls a row."""
    texts = [t for row in rows for t in (row.payload, row.headers) if t is not None]
    try:
        return text_bytes("".join(texts))
    except TypeError:  # SQLite keeps a number or a blob as it was written
        return sum(map(text_bytes, texts))


#: Rows averaging more than the byte bound over this many are large: their claims size them
#: after locking them (:attr:`ClaimFit.size_late`), where the lookup costs little beside the
#: rendering of their JSON.
LARGE_ROW_SHARE = 1024


@dataclass(slots=True)
class ClaimFit:
    """How many rows a claim under a byte bound reads. A claim locks and sizes up to its row
    limit and leases those that fit, and sizing a row reads its payload whole (3 ms for 900
    KB on PostgreSQL), so under large rows most of a full-size claim's reading was waste
    (100 rows sized to lease 4: 360 ms a claim instead of 64). After a claim the bound cut
    short, the next reads one row more than fitted (the one that shows where the bound
    falls; reading twice as many sized as many rows again as it leased, a third of a large
    drain's claim time); claims that fit whole double it back;
    a claim that came back short without reaching the bound (the large rows are gone) lifts
    the cap. Rows of ordinary size never meet the bound, so the cap stays off for them."""

    #: Most rows the next claim reads; None: its row limit alone.
    cap: int | None = None
    #: Whether the next claim sizes its rows only after locking them (``Ask.size_late``):
    #: until a claim shows small rows, and again once rows average over
    #: 1/:data:`LARGE_ROW_SHARE` of the bound (16 KiB at the default). Sized while
    #: the lanes read them, a lane planned as a sort over every pending row (a table never
    #: analyzed) sizes the whole backlog; sized after, each row costs a lookup more.
    size_late: bool = True

    def ask(self, limit: int) -> int:
        """The row limit of the next claim, asked for ``limit``."""
        return limit if self.cap is None else min(limit, self.cap)

    def claimed(self, asked: int, got: int, got_bytes: int, max_bytes: int) -> None:
        """A claim that read up to ``asked`` rows leased ``got`` of ``got_bytes`` bytes."""
        if got:
            self.size_late = got_bytes > got * (max_bytes // LARGE_ROW_SHARE)
        if got < asked and got_bytes > max_bytes // 2:
            self.cap = got + 1  # cut by the bound
        elif got < asked:
            self.cap = None
        elif self.cap is not None:
            self.cap *= 2


__all__ = ["Ask", "ClaimFit", "RunEnd", "fit_bytes", "rows_bytes", "text_bytes"]
