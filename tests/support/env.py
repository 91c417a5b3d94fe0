"""What the process-starting helpers share: a relay process's environment and a bounded wait."""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def wait_until(
    predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05
) -> float:
    """Poll ``predicate`` until truthy; returns the seconds it took, fails after ``timeout``."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - start


def relay_env(**settings: object) -> dict[str, str]:
    """This environment without any inherited ``RELAY_*``, plus ``settings`` (None: left out)
    as ``RELAY_<KEY>``; unbuffered, so a child's log is complete when it is killed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update({f"RELAY_{k.upper()}": str(v) for k, v in settings.items() if v is not None})
    env["PYTHONUNBUFFERED"] = "1"
    return env
