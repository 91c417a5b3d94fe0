"""Health probes for Docker and Kubernetes: ``relay probe ready`` and ``relay probe live``.

Readiness: the database answers and the events broker accepts a connection, checked from the
probe's own process: during an outage the relay is handling, it names what is unavailable.
Liveness of a ``relay dispatch --loop`` process: the heartbeat file its loop touches on every
pass, and every second while it rests or waits out an outage (its breaker open, the database's
retry backoff), is fresher than the bound the relay wrote into it
(:func:`relay.runners.loop.liveness_seconds`); a loop stuck in a call stops touching it.
Under ``RELAY_DATABASES`` the file carries the oldest child's beat, so one hung child fails it.
A Celery worker's liveness is Celery's own ``celery -A relay inspect ping -d celery@$HOSTNAME``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from relay.commands.command import Command
from relay.config import Settings
from relay.config.settings import DATABASE_ONLY
from relay.exceptions import BrokerUnavailable, ConfigError, StoreError


def ready(settings: Settings) -> tuple[bool, str]:
    """(healthy, why): the database and the events broker are reachable."""
    from relay.commands.doctor import reach
    from relay.store.engine import create_engine

    engine = create_engine(settings.database_url)
    try:
        reach.database(engine)
    except StoreError as exc:
        return False, str(exc)
    finally:
        engine.dispose()
    try:
        with reach.broker(settings):
            pass
    except (BrokerUnavailable, ConfigError) as exc:
        return False, str(exc)
    return True, "ready: database and broker reachable"


#: The bound of a heartbeat file that names none (written by an older relay).
DEFAULT_MAX_AGE_SECONDS = 60.0


def live(heartbeat_file: str | None, max_age: float | None = None) -> tuple[bool, str]:
    """(healthy, why): ``heartbeat_file`` was touched within ``max_age`` seconds (by default
    the bound the relay wrote into the file)."""
    if not heartbeat_file:
        return False, "give --heartbeat-file (the one `relay dispatch --loop` touches)"
    try:
        age = time.time() - os.stat(heartbeat_file).st_mtime
        if max_age is None:
            max_age = written_bound(heartbeat_file)
    except OSError as exc:
        return False, f"no heartbeat: {exc}"
    if age > max_age:
        return False, f"stale heartbeat: the loop last passed {age:.0f}s ago (> {max_age:g}s)"
    return True, f"live: the loop passed {age:.1f}s ago"


def written_bound(heartbeat_file: str) -> float:
    """The liveness bound the relay wrote into its heartbeat file, or the old default."""
    from relay.runners.loop import BOUND_PREFIX

    with open(heartbeat_file) as f:
        line = f.readline().strip()
    if line.startswith(BOUND_PREFIX):
        try:
            return float(line.removeprefix(BOUND_PREFIX))
        except ValueError:
            pass
    return DEFAULT_MAX_AGE_SECONDS


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "kind",
        choices=["ready", "live"],
        help="ready: database and broker reachable; live: a dispatch loop's heartbeat is fresh",
    )
    p.add_argument("--heartbeat-file", help="live: the file `relay dispatch --loop` touches")
    p.add_argument(
        "--max-age",
        type=float,
        help="live: seconds (default: the bound the relay wrote into the file, from its lease "
        "and confirm timeout: 2 x RELAY_LEASE_SECONDS + RELAY_CONFIRM_TIMEOUT_SECONDS)",
    )


def _run(settings: Settings, args: argparse.Namespace) -> int:
    ok, detail = (
        ready(settings) if args.kind == "ready" else live(args.heartbeat_file, args.max_age)
    )
    print(detail, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


COMMAND = Command(
    "probe",
    "health probes for Docker and Kubernetes (exit 0 = healthy)",
    _arguments,
    _run,
    uses=DATABASE_ONLY | {"broker_url", "events_url"},
)
