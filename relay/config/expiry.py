"""Deadlines of events: durations (``30s``, ``15m``, ``1h``, ``7d``), event-type globs, and
``RELAY_EXPIRE_AFTER``, the default deadline per event type that the producer gives an event
whose caller gave none. Pure: the producer reads the variable once (:func:`from_env`).

``RELAY_EXPIRE_AFTER="orders.reminder=1h,orders.*=1d,*=7d"``: each part is ``PATTERN=DURATION``
(or ``PATTERN=never``, no deadline), the pattern a glob over the event type as
``relay failed list --event-type`` takes it (``*`` any run of characters, ``?`` one). The
**most specific** pattern that matches wins, whatever the order they are listed in: an exact
name before any glob, then the glob with the most characters that are not wildcards; a tie
goes to the one listed first. Order-free, so adding ``*=7d`` in front of a list never
silently overrides the types named after it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from relay.exceptions import ConfigError

VARIABLE = "RELAY_EXPIRE_AFTER"
#: What a part's duration says for "no deadline for these types".
NEVER = "never"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: The longest duration accepted: a century (beyond, datetime arithmetic overflows).
MAX_DURATION_SECONDS = 100 * 366 * 86400
_DURATION = re.compile(r"\s*(\d{1,12}(?:\.\d{1,9})?)\s*([smhdw]?)\s*", re.ASCII)


def duration_seconds(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d``, ``2w`` -> seconds; ValueError naming the
    text when it is no such duration or is longer than a century."""
    match = _DURATION.fullmatch(text)
    if not match:
        raise ValueError(f"{text[:40]!r} is not a duration like 90s, 15m, 12h or 7d")
    seconds = float(match[1]) * _UNITS[match[2] or "s"]
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"{text[:40]!r} is longer than a century")
    return seconds


def glob_regex(glob: str) -> re.Pattern[str]:
    """The event-type glob ``glob`` as a regular expression matching whole names: ``*`` any
    run of characters, ``?`` one, everything else itself (as SQL's LIKE reads the same glob in
    ``relay.store.operations.filters.like_pattern``)."""
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in glob)
    return re.compile("".join(parts), re.DOTALL)


@dataclass(frozen=True, slots=True)
class Rule:
    """One part of ``RELAY_EXPIRE_AFTER``: event types matching ``pattern`` expire
    ``seconds`` after they are due (None: never)."""

    pattern: str
    seconds: float | None

    @property
    def exact(self) -> bool:
        return "*" not in self.pattern and "?" not in self.pattern

    @property
    def specificity(self) -> tuple[bool, int]:
        """Exact names first, then the most literal characters."""
        literal = sum(c not in "*?" for c in self.pattern)
        return (self.exact, literal)


@dataclass(frozen=True, slots=True)
class ExpireAfter:
    """The parsed ``RELAY_EXPIRE_AFTER``: which deadline an event type gets by default."""

    #: The rules, most specific first (a tie keeps the listed order).
    rules: tuple[Rule, ...] = ()

    @classmethod
    def parse(cls, raw: str, var: str = VARIABLE) -> ExpireAfter:
        """``raw`` as the variable ``var`` holds it; ConfigError naming the variable and the
        bad part otherwise."""
        rules: list[Rule] = []
        seen: set[str] = set()
        for part in raw.split(","):
            if not part.strip():
                continue
            pattern, sep, duration = part.partition("=")
            pattern, duration = pattern.strip(), duration.strip()
            where = f"{var}: the part {part.strip()[:60]!r}"
            if not sep or not pattern:
                raise ConfigError(f"{where} is not PATTERN=DURATION (orders.reminder=1h, *=7d)")
            if pattern in seen:
                raise ConfigError(f"{where} repeats the pattern {pattern!r}")
            seen.add(pattern)
            if duration.lower() == NEVER:
                rules.append(Rule(pattern, None))
                continue
            try:
                seconds = duration_seconds(duration)
            except ValueError as exc:
                raise ConfigError(f"{where}: {exc}") from None
            if seconds <= 0:
                raise ConfigError(f"{where}: the duration must be above 0 (or {NEVER})")
            rules.append(Rule(pattern, seconds))
        ordered = sorted(enumerate(rules), key=lambda ir: (ir[1].specificity, -ir[0]))
        return cls(tuple(rule for _, rule in reversed(ordered)))

    def seconds_for(self, event_type: str) -> float | None:
        """The default deadline of ``event_type``, in seconds after it is due; None: none."""
        for rule in self.rules:
            if rule.exact:
                if rule.pattern == event_type:
                    return rule.seconds
            elif _compiled(rule.pattern).fullmatch(event_type):
                return rule.seconds
        return None


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    found = _PATTERNS.get(pattern)
    if found is None:
        found = _PATTERNS[pattern] = glob_regex(pattern)
    return found


def from_env(environ: Mapping[str, str] | None = None) -> ExpireAfter | None:
    """``RELAY_EXPIRE_AFTER`` alone, for the producer (as ``RELAY_MAX_PAYLOAD_BYTES``: a bad
    value of an unrelated setting must not fail the application's transaction); None when
    unset."""
    env = os.environ if environ is None else environ
    raw = env.get(VARIABLE, "").strip()
    if not raw:
        return None
    return ExpireAfter.parse(raw)
