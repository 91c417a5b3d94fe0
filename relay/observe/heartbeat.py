"""The heartbeat file of ``relay dispatch --loop``, written and read in one place: the loop
touches it on every pass (and every second of a rest), its first line says how stale it may
grow before the process counts as hung, and ``relay probe live`` judges it by that line.

Under ``RELAY_DATABASES`` with a process per database, each child beats ``PATH.<index>`` and the
supervisor gives the shared file the oldest child's time (:mod:`relay.runners.supervisor`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

#: The heartbeat file's one line: ``stale-after-seconds=70``.
BOUND_PREFIX = "stale-after-seconds="
#: The bound of a heartbeat file that names none (written by an older relay).
DEFAULT_MAX_AGE_SECONDS = 60.0


def beats(path: str | None, bound: float | None = None) -> Callable[[], None] | None:
    """What the loop calls on every pass (and every second of a rest) to mark itself alive.
    With ``bound``, the file first says how stale it may grow before the process counts as
    hung (:func:`relay.config.timing.liveness_seconds`), so the probe needs no settings."""
    if not path:
        return None
    if bound is None:
        return lambda: touch(path)
    first = [True]

    def beat() -> None:
        # Written at the first pass, not before: the file's existence says the loop runs.
        if first[0]:
            write_bound(path, bound)
            first[0] = False
        else:
            touch(path)

    return beat


def oldest(
    path: str | None, bound: float, beats: Callable[[], Iterable[float]]
) -> Callable[[], None] | None:
    """A heartbeat over several (a supervisor's, over its children's files): each call gives
    ``path`` the time of the oldest of ``beats()`` (0 for one that never beat), so the file goes
    stale as soon as any of them does, and when the caller itself stops calling. Its first
    call starts the file with ``bound``."""
    if not path:
        return None
    first = [True]

    def beat() -> None:
        if first[0]:
            write_bound(path, bound)
            first[0] = False
        when = min(beats(), default=0.0)
        if when > 0:
            os.utime(path, (when, when))

    return beat


def write_bound(path: str, bound: float) -> None:
    """Start the heartbeat file afresh with the liveness bound its beats keep."""
    with open(path, "w") as f:
        f.write(f"{BOUND_PREFIX}{bound:g}\n")


def touch(path: str) -> None:
    """Mark the loop alive (creates the file)."""
    with open(path, "a"):
        pass
    os.utime(path, None)


def written_bound(path: str) -> float:
    """The liveness bound the relay wrote into its heartbeat file, or the old default."""
    with open(path) as f:
        line = f.readline().strip()
    if line.startswith(BOUND_PREFIX):
        try:
            return float(line.removeprefix(BOUND_PREFIX))
        except ValueError:
            pass
    return DEFAULT_MAX_AGE_SECONDS


def live(path: str | None, max_age: float | None = None) -> tuple[bool, str]:
    """(healthy, why): the heartbeat file at ``path`` was touched within ``max_age`` seconds
    (by default the bound the relay wrote into the file)."""
    if not path:
        return False, "give --heartbeat-file (the one `relay dispatch --loop` touches)"
    try:
        age = time.time() - os.stat(path).st_mtime
        if max_age is None:
            max_age = written_bound(path)
    except OSError as exc:
        return False, f"no heartbeat: {exc}"
    if age > max_age:
        return False, f"stale heartbeat: the loop last passed {age:.0f}s ago (> {max_age:g}s)"
    return True, f"live: the loop passed {age:.1f}s ago"
