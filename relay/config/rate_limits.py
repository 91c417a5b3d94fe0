"""``RELAY_RATE_LIMITS``: fleet-wide caps on how many events of a type leave the relay per
second (``orders.*=50/s,mail.send=5/s``); pure parsing, and the token bucket's arithmetic.

Each limit is one token bucket shared by every relay of the database (a row of
``relay_rate_buckets``, refilled by the database clock; the claim takes tokens in its own
transaction: ``relay.store.dispatch_path.levers``). A claim of a limited type takes at most as
many rows as the bucket holds whole tokens, and pays for what it took.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from relay.exceptions import ConfigError

VAR = "RELAY_RATE_LIMITS"
#: A bucket holds at most this many seconds of its rate: a relay that claims at least once a
#: second (every relay does: the tick is at most 1 s) loses no token to the cap, and a
#: limited type never leaves faster than this burst on top of its rate.
BURST_SECONDS = 1.0
#: A relay that found the bucket empty claims the type again when about this share of a
#: second's worth of tokens is back (at least one token): claims of a limited type take
#: turns about ten times a second instead of once per token.
REST_SHARE = 0.1
#: The fastest rate a limit accepts (faster is no limit at all on one relay).
MAX_RATE = 1_000_000.0
_ITEM = re.compile(r"\s*([^=\s]+)\s*=\s*(\d{1,9}(?:\.\d{1,6})?)\s*/\s*s\s*", re.ASCII)


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``rate`` events a second of the types the glob ``pattern`` matches (``*`` any
    run of characters, ``?`` one: the syntax of ``relay failed list --event-type``)."""

    pattern: str
    rate: float

    @property
    def burst(self) -> float:
        """Most tokens the bucket holds (:data:`BURST_SECONDS` of the rate, at least one)."""
        return max(1.0, self.rate * BURST_SECONDS)

    @property
    def name(self) -> str:
        """The bucket row's name: the pattern (one bucket per pattern, whatever its rate)."""
        return self.pattern


def parse(raw: str | None) -> tuple[RateLimit, ...]:
    """``T=N/s,...`` -> the limits, in the order given (a type matched by two patterns is
    limited by the first). A bad item is refused with a :class:`ConfigError` naming it."""
    if raw is None or not raw.strip():
        return ()
    limits: list[RateLimit] = []
    for item in raw.split(","):
        if not item.strip():
            continue
        match = _ITEM.fullmatch(item)
        if match is None:
            raise ConfigError(
                f"{VAR}: {item.strip()[:60]!r} is not TYPE_PATTERN=N/s (e.g. orders.*=50/s)"
            )
        pattern, rate = match[1], float(match[2])
        if not 0 < rate <= MAX_RATE:
            raise ConfigError(f"{VAR}: {item.strip()[:60]!r}: the rate must be > 0 and <= 1e6/s")
        if len(pattern) > 255:
            raise ConfigError(f"{VAR}: pattern {pattern[:40]!r}... is longer than 255 characters")
        if any(limit.pattern == pattern for limit in limits):
            raise ConfigError(f"{VAR}: {pattern!r} is limited twice")
        limits.append(RateLimit(pattern, rate))
    return tuple(limits)


def refilled(tokens: float, elapsed_seconds: float, limit: RateLimit) -> float:
    """The bucket's tokens ``elapsed_seconds`` after it last held ``tokens``: ``min(burst,
    tokens + rate * elapsed)``; a clock that went back adds nothing."""
    return min(limit.burst, tokens + limit.rate * max(0.0, elapsed_seconds))


def takeable(tokens: float, wanted: int) -> int:
    """How many rows a claim that wants ``wanted`` may take from a bucket holding ``tokens``:
    the whole tokens, no more than wanted."""
    return max(0, min(wanted, math.floor(tokens + 1e-9)))


def rest_seconds(tokens: float, limit: RateLimit) -> float:
    """How long a relay leaves the type alone after a claim left ``tokens`` in the bucket:
    until about :data:`REST_SHARE` of a second's worth is back (0: it may claim now)."""
    wanted = min(limit.burst, max(1.0, limit.rate * REST_SHARE))
    return max(0.0, (wanted - tokens) / limit.rate)


__all__ = ["RateLimit", "parse", "refilled", "rest_seconds", "takeable"]
